package bench

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/fencedio/fenced/internal/loadgen"
)

func TestMedian(t *testing.T) {
	runs := func(ops ...float64) []RunResult {
		out := make([]RunResult, len(ops))
		for i, o := range ops {
			out[i] = RunResult{Result: loadgen.Result{OpsPerSec: o, P50Ms: o / 10, P99Ms: o / 5, Errors: 1}, ServerCPUPerOpUs: o * 2, ClientCPUPerOpUs: o * 3}
		}
		return out
	}
	tests := []struct {
		name    string
		runs    []RunResult
		wantOps float64
	}{
		{"none", nil, 0},
		{"one", runs(5), 5},
		{"odd count, unsorted", runs(30, 10, 20), 20},
		{"even count averages the middle two", runs(40, 10, 30, 20), 25},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := median(tt.runs)
			if m.OpsPerSec != tt.wantOps || m.P50Ms != tt.wantOps/10 || m.P99Ms != tt.wantOps/5 ||
				m.ServerCPUPerOpUs != tt.wantOps*2 || m.ClientCPUPerOpUs != tt.wantOps*3 {
				t.Errorf("median = %+v, want ops %v", m, tt.wantOps)
			}
			if m.Errors != uint64(len(tt.runs)) {
				t.Errorf("errors = %d, want the sum %d", m.Errors, len(tt.runs))
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{"quick defaults", Config{Quick: true}, ""},
		{"unknown workload", Config{Workloads: []string{"nope"}}, "unknown workload"},
		{"zero clients", Config{Clients: []int{0}}, "below 1"},
		{"negative duration", Config{Duration: -time.Second}, "negative"},
		{"unknown system", Config{Systems: []string{"consul"}}, "unknown or repeated system"},
		{"zk without ZooKeeper", Config{Systems: []string{"zk"}, ZooKeeperJar: "/nonexistent/zookeeper.jar"}, "not installed"},
		{"repeated system", Config{Systems: []string{"etcd", "etcd"}}, "unknown or repeated system"},
		{"fenced-bolt without its binary", Config{Systems: []string{"fenced-bolt"}}, "FencedBoltBin"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate() = %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
	if err := (Config{}).Validate(); err != nil {
		t.Fatal(err)
	}
	full := Config{}.withDefaults()
	if full.Duration != 10*time.Second || full.Rounds != 3 || full.Leases != 1_000_000 {
		t.Errorf("full defaults = %v, %d rounds, %d leases", full.Duration, full.Rounds, full.Leases)
	}
}

// Ratios are taken against the etcd of the same size, and only when it
// ran.
func TestRatios(t *testing.T) {
	sm := func(name, ref string, ops, server, client float64) SystemMedian {
		return SystemMedian{System: name, Ref: ref, Median: Median{OpsPerSec: ops, ServerCPUPerOpUs: server, ClientCPUPerOpUs: client}}
	}
	row := Row{Systems: []SystemMedian{
		sm("fenced", "etcd", 300, 50, 100), sm("etcd", "", 100, 200, 400),
		sm("fenced-3", "etcd-3", 200, 80, 100), sm("etcd-3", "", 50, 400, 200),
	}}
	row.setRatios()
	want := [][3]float64{{3, 0.25, 0.25}, {0, 0, 0}, {4, 0.2, 0.5}, {0, 0, 0}}
	for i, s := range row.Systems {
		if got := [3]float64{s.Ratio, s.ServerCPURatio, s.ClientCPURatio}; got != want[i] {
			t.Errorf("%s: ratios %v, want %v", s.System, got, want[i])
		}
	}
	alone := Row{Systems: []SystemMedian{sm("fenced-3", "etcd-3", 200, 80, 100)}}
	alone.setRatios()
	if s := alone.Systems[0]; s.Ratio != 0 || s.ServerCPURatio != 0 {
		t.Errorf("ratios without etcd-3: %+v", s)
	}
}

// procCPU reads this process's CPU time as getrusage counts it, within a
// few ticks (the kernel accounts ticks per thread).
func TestProcCPU(t *testing.T) {
	// Burn CPU (not wall time: the machine may be busy) so that both
	// readings are well above a tick.
	for start := selfCPU(); selfCPU()-start < 300*time.Millisecond; {
	}
	fromProc, err := procCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	self := selfCPU()
	if fromProc < 150*time.Millisecond || fromProc > self+5*clockTick || fromProc < self-5*clockTick {
		t.Errorf("/proc says %v, getrusage %v", fromProc, self)
	}
}

// TestQuickRun builds both servers and runs every workload in quick mode
// against both: a smoke test of the whole harness (about 15-20 s with a
// warm build cache).
func TestQuickRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs fenced and etcd")
	}
	const leases = 2000
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	rep, err := Run(ctx, Config{Quick: true, Duration: 200 * time.Millisecond, Leases: leases}, &progress)
	if err != nil {
		t.Fatalf("Run: %v\nprogress:\n%s", err, progress.String())
	}
	wantRows := 0
	for _, w := range workloads {
		wantRows += len(w.clients)
	}
	if len(rep.Rows) != wantRows {
		t.Fatalf("%d rows, want %d", len(rep.Rows), wantRows)
	}
	for _, r := range rep.Rows {
		for _, m := range r.Systems {
			if m.OpsPerSec <= 0 || m.P50Ms <= 0 || m.P99Ms < m.P50Ms || m.ClientCPUPerOpUs <= 0 {
				t.Errorf("%s %d clients, %s: %+v", r.Workload, r.Clients, m.System, m)
			}
			if m.Errors != 0 {
				t.Errorf("%s %d clients, %s: %d errors, first %q", r.Workload, r.Clients, m.System, m.Errors, m.Runs[0].FirstError)
			}
		}
		if f, e := r.Systems[0], r.Systems[1]; f.Ratio != f.OpsPerSec/e.OpsPerSec {
			t.Errorf("%s ratio %v, want %v", r.Workload, f.Ratio, f.OpsPerSec/e.OpsPerSec)
		}
	}
	if len(rep.Memory) != 1 {
		t.Fatalf("%d memory results, want fenced's", len(rep.Memory))
	}
	m := rep.Memory[0]
	if m.Created != leases || m.ActiveGauge != leases || m.Errors != 0 {
		t.Errorf("memory: created %d, gauge %d, errors %d; want %d, %d, 0", m.Created, m.ActiveGauge, m.Errors, leases, leases)
	}
	if m.RSS <= 0 || m.IdleRSS <= 0 || m.PeakRSS < m.RSS {
		t.Errorf("memory: rss %d, idle %d, peak %d", m.RSS, m.IdleRSS, m.PeakRSS)
	}

	var md bytes.Buffer
	if err := rep.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| acquire+release | 64 | fenced |", "| acquire+release | 64 | etcd |", "| contended handoff | 16 |", "| renew (unary) | 16 |", "Memory: fenced RSS"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, md.String())
		}
	}
}

// TestQuickRunZooKeeper runs the zk system in quick mode next to fenced:
// ZooKeeper takes every workload but the renewals, and the memory workload
// counts its held locks. It is skipped when ZooKeeper is not installed.
func TestQuickRunZooKeeper(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs fenced and ZooKeeper")
	}
	if err := ZooKeeperInstalled(""); err != nil {
		t.Skipf("skipping the ZooKeeper run: %v", err)
	}
	const locks = 500
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	rep, err := Run(ctx, Config{Quick: true, Duration: 300 * time.Millisecond, Leases: locks, Clients: []int{1, 16},
		Systems: []string{"fenced", "zk"}, Workloads: []string{"acquire-release", "contended", "renew", "memory"}}, &progress)
	if err != nil {
		t.Fatalf("Run: %v\nprogress:\n%s", err, progress.String())
	}
	for _, r := range rep.Rows {
		var names []string
		for _, m := range r.Systems {
			names = append(names, m.System)
			if m.OpsPerSec <= 0 || m.Errors != 0 {
				t.Errorf("%s %d clients, %s: %+v", r.Workload, r.Clients, m.System, m)
			}
		}
		want := "fenced,zk"
		if r.Workload == "renew" {
			want = "fenced"
		}
		if got := strings.Join(names, ","); got != want {
			t.Errorf("%s: systems %s, want %s", r.Workload, got, want)
		}
	}
	if len(rep.Rows) != 4 {
		t.Errorf("%d rows, want 4", len(rep.Rows))
	}
	if len(rep.Memory) != 2 {
		t.Fatalf("%d memory results, want fenced's and zk's", len(rep.Memory))
	}
	if m := rep.Memory[1]; m.System != "zk" || m.Created != locks || m.ActiveGauge != locks || m.Errors != 0 || m.RSS <= 0 {
		t.Errorf("zk memory: %+v", m)
	}
	if _, err := exec.LookPath("jcmd"); err == nil && rep.Memory[1].HeapAfterGC <= 0 {
		t.Errorf("zk memory: jcmd is installed but no heap figure: %+v", rep.Memory[1])
	}
	var md bytes.Buffer
	if err := rep.WriteWide(&md); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| workload | clients | fenced | zk | fenced / zk |", "| renew (unary) | 16 |", "Memory: zk RSS", "fdatasync"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("wide table lacks %q:\n%s", want, md.String())
		}
	}
}
