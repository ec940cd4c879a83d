package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/internal/loadgen"
)

// Report is the outcome of Run.
type Report struct {
	Seconds float64  `json:"secondsPerRun"`
	Rounds  int      `json:"rounds"`
	Systems []string `json:"systems"`
	Rows    []Row    `json:"rows"`
	// RSSAfterRuns is each system's RSS after all throughput runs, in
	// bytes (of its largest node, for a cluster).
	RSSAfterRuns map[string]int64 `json:"rssAfterRuns,omitempty"`
	Memory       []*Memory        `json:"memory,omitempty"`
	Machine      Machine          `json:"machine"`
	// TotalSeconds is the wall time of the whole run, builds included.
	TotalSeconds float64 `json:"totalSeconds"`
}

// Row is one workload at one client count, with every system's medians.
type Row struct {
	Workload string         `json:"workload"`
	Title    string         `json:"title"`
	Clients  int            `json:"clients"`
	Op       string         `json:"op"`
	Latency  string         `json:"latency"`
	Systems  []SystemMedian `json:"systems"`
}

// SystemMedian is one system's medians in a row, with its ratios against
// the etcd system of the same size (Ref) when that ran: ops/s over etcd's
// ops/s, and CPU per operation over etcd's CPU per operation.
type SystemMedian struct {
	System string `json:"system"`
	Median
	Ref            string  `json:"ref,omitempty"`
	Ratio          float64 `json:"ratio,omitempty"`
	ServerCPURatio float64 `json:"serverCpuRatio,omitempty"`
	ClientCPURatio float64 `json:"clientCpuRatio,omitempty"`
}

// Median summarizes the rounds of one system: each figure is the median of
// that figure over the rounds.
type Median struct {
	OpsPerSec float64 `json:"opsPerSec"`
	P50Ms     float64 `json:"p50Ms"`
	P99Ms     float64 `json:"p99Ms"`
	Errors    uint64  `json:"errors"`
	// CPU time per operation, in microseconds: of the server processes
	// (all nodes of a cluster) and of the harness process (the benchmark
	// clients and the load generator).
	ServerCPUPerOpUs float64     `json:"serverCpuPerOpUs"`
	ClientCPUPerOpUs float64     `json:"clientCpuPerOpUs"`
	Runs             []RunResult `json:"runs"`
}

// RunResult is one run of one workload against one system.
type RunResult struct {
	loadgen.Result
	// CPU time used during the run, in seconds, and per operation, in
	// microseconds: server processes from /proc/PID/stat (10ms ticks),
	// the harness from getrusage.
	ServerCPUSeconds float64 `json:"serverCpuSeconds"`
	ClientCPUSeconds float64 `json:"clientCpuSeconds"`
	ServerCPUPerOpUs float64 `json:"serverCpuPerOpUs"`
	ClientCPUPerOpUs float64 `json:"clientCpuPerOpUs"`
}

// Memory is the result of the memory workload against one system.
type Memory struct {
	System        string  `json:"system"`
	Leases        int     `json:"leases"`
	Created       int64   `json:"created"`
	ActiveGauge   int64   `json:"activeGauge"` // fenced_leases_active (ZooKeeper: zk_ephemerals_count) after creation
	Errors        uint64  `json:"errors"`
	FirstError    string  `json:"firstError,omitempty"`
	CreateSeconds float64 `json:"createSeconds"`
	IdleRSS       int64   `json:"idleRss"`
	RSS           int64   `json:"rss"`
	PeakRSS       int64   `json:"peakRss"`
	BytesPerLease float64 `json:"bytesPerLease"`
	// HeapAfterGC is the JVM's used heap right after a full collection
	// (ZooKeeper, when jcmd is installed): the live data, which RSS only
	// bounds from above.
	HeapAfterGC int64 `json:"heapAfterGc,omitempty"`
}

// Run builds and starts the servers, runs the selected workloads and
// returns the report. Progress lines go to progress. When the memory
// workload fails after the throughput runs, Run returns their report along
// with the error.
func Run(ctx context.Context, cfg Config, progress io.Writer) (*Report, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.BenchDir == "" && (cfg.FencedBin == "" || cfg.EtcdBin == "") {
		dir, err := findBenchDir()
		if err != nil {
			return nil, fmt.Errorf("bench config: %w", err)
		}
		cfg.BenchDir = dir
	}
	began := time.Now()
	logf := func(format string, args ...any) {
		fmt.Fprintf(progress, "[%6.1fs] %s\n", time.Since(began).Seconds(), fmt.Sprintf(format, args...))
	}
	tmp, err := os.MkdirTemp("", "fencedbench-")
	if err != nil {
		return nil, err
	}
	if cfg.KeepTemp {
		logf("temporary directory kept: %s", tmp)
	} else {
		defer os.RemoveAll(tmp)
	}

	machine, err := describeMachine(tmp)
	if err != nil {
		return nil, err
	}
	logf("machine: %s", machine)

	var throughput []workload
	for _, w := range workloads {
		if cfg.selected(w.name) {
			if cfg.Clients != nil && w.name == "acquire-release" {
				w.clients = cfg.Clients
			}
			throughput = append(throughput, w)
		}
	}
	bins, err := buildBinaries(ctx, &cfg, tmp, len(throughput) > 0, logf)
	if err != nil {
		return nil, err
	}
	rep := &Report{Seconds: cfg.Duration.Seconds(), Rounds: cfg.Rounds, Systems: cfg.Systems, Machine: machine}
	maxLeases := max(2_000_000, 2*cfg.Leases)
	if len(throughput) > 0 {
		if err := runThroughput(ctx, cfg, throughput, tmp, bins, maxLeases, rep, logf); err != nil {
			return nil, err
		}
	}
	if cfg.selected(memoryWorkload) {
		for _, name := range cfg.Systems {
			spec, _ := specByName(name)
			if spec.etcd || spec.nodes != 1 {
				continue
			}
			run := runMemory
			if spec.zk {
				run = runZKMemory
			}
			m, err := run(ctx, cfg.Leases, filepath.Join(tmp, "memory-"+name), name, bins[name], maxLeases, logf)
			if err != nil {
				rep.TotalSeconds = time.Since(began).Seconds()
				return rep, err
			}
			rep.Memory = append(rep.Memory, m)
		}
	}
	rep.TotalSeconds = time.Since(began).Seconds()
	return rep, nil
}

// buildBinaries returns the binary of each selected system, building
// fenced and etcdnode unless prebuilt ones were given.
func buildBinaries(ctx context.Context, cfg *Config, tmp string, etcdNeeded bool, logf func(string, ...any)) (map[string]string, error) {
	fencedBin, etcdBin := cfg.FencedBin, cfg.EtcdBin
	if fencedBin == "" {
		fencedBin = filepath.Join(tmp, "bin", "fenced")
		logf("building fenced")
		if err := goBuild(ctx, filepath.Dir(cfg.BenchDir), "./cmd/fenced", fencedBin); err != nil {
			return nil, err
		}
	}
	bins := map[string]string{}
	for _, name := range cfg.Systems {
		spec, _ := specByName(name)
		switch {
		case spec.etcd && etcdNeeded && etcdBin == "":
			etcdBin = filepath.Join(tmp, "bin", "etcdnode")
			logf("building etcdnode")
			if err := goBuild(ctx, cfg.BenchDir, "./cmd/etcdnode", etcdBin); err != nil {
				return nil, err
			}
			bins[name] = etcdBin
		case spec.etcd:
			bins[name] = etcdBin
		case spec.zk:
			bins[name] = cfg.ZooKeeperJar
		case name == "fenced-bolt":
			bins[name] = cfg.FencedBoltBin
		default:
			bins[name] = fencedBin
		}
	}
	return bins, nil
}

func runThroughput(ctx context.Context, cfg Config, ws []workload, tmp string, bins map[string]string, maxLeases int, rep *Report, logf func(string, ...any)) error {
	var deps []*deployment
	defer func() {
		for _, d := range deps {
			d.stop()
		}
	}()
	for _, name := range cfg.Systems {
		spec, _ := specByName(name)
		logf("starting %s", name)
		d, err := deploy(ctx, spec, bins[name], filepath.Join(tmp, name), maxLeases)
		if err != nil {
			return err
		}
		deps = append(deps, d)
		for _, n := range d.nodes {
			logf("%s: %s pid %d at %s", name, n.name, n.pid(), n.endpoint)
		}
	}
	type rowKey struct{ w, n int }
	var order []rowKey
	for wi, w := range ws {
		for _, n := range w.clients {
			order = append(order, rowKey{wi, n})
		}
	}
	if cfg.Warmup > 0 {
		// Every system gets the same unmeasured warm-up: ZooKeeper's JIT
		// compiles its hot paths only after a few thousand requests.
		for _, d := range deps {
			res, err := runOnce(ctx, d.sys, d.cpu, workloads[0], warmupClients, cfg.Warmup)
			if err != nil {
				return fmt.Errorf("warm-up of %s: %w", d.spec.name, err)
			}
			logf("warm-up: %s %d clients %s: %.0f ops/s", workloads[0].name, warmupClients, d.spec.name, res.OpsPerSec)
		}
	}
	runs := make(map[rowKey][][]RunResult)
	// Rounds outermost, so that drift over the run (data growing, caches,
	// the machine's other load) spreads over every system and row.
	for round := 1; round <= cfg.Rounds; round++ {
		for _, k := range order {
			w := ws[k.w]
			if runs[k] == nil {
				runs[k] = make([][]RunResult, len(deps))
			}
			for di, d := range deps {
				if !w.offeredBy(d.spec) {
					continue
				}
				if err := d.exited(); err != nil {
					return err
				}
				res, err := runOnce(ctx, d.sys, d.cpu, w, k.n, cfg.Duration)
				if err != nil {
					return fmt.Errorf("round %d, %s, %d clients: %w", round, w.name, k.n, err)
				}
				res.Round = round
				runs[k][di] = append(runs[k][di], res)
				logf("%s", progressLine(round, cfg.Rounds, w.name, k.n, d.spec.name, res))
			}
		}
	}
	for _, k := range order {
		w := ws[k.w]
		row := Row{Workload: w.name, Title: w.title, Clients: k.n, Op: w.op, Latency: w.latency}
		for di, d := range deps {
			if !w.offeredBy(d.spec) {
				continue
			}
			row.Systems = append(row.Systems, SystemMedian{System: d.spec.name, Median: median(runs[k][di]), Ref: d.spec.ref})
		}
		row.setRatios()
		rep.Rows = append(rep.Rows, row)
	}
	rep.RSSAfterRuns = map[string]int64{}
	for _, d := range deps {
		for _, n := range d.nodes {
			if rss, _, err := n.rss(); err == nil && rss > rep.RSSAfterRuns[d.spec.name] {
				rep.RSSAfterRuns[d.spec.name] = rss
			}
		}
	}
	return nil
}

// warmupClients is the client count of the warm-up run (acquire-release).
const warmupClients = 16

func progressLine(round, rounds int, workload string, clients int, system string, res RunResult) string {
	msg := fmt.Sprintf("round %d/%d  %-16s %3d clients  %-11s %9.0f ops/s  p50 %s  p99 %s  cpu/op server %.0fµs client %.0fµs",
		round, rounds, workload, clients, system, res.OpsPerSec, fmtMs(res.P50Ms), fmtMs(res.P99Ms), res.ServerCPUPerOpUs, res.ClientCPUPerOpUs)
	if res.Errors > 0 {
		msg += fmt.Sprintf("  %d errors, first: %s", res.Errors, res.FirstError)
	}
	return msg
}

// setRatios fills each system's ratios against its reference system.
func (r *Row) setRatios() {
	ratio := func(a, b float64) float64 {
		if b == 0 {
			return 0
		}
		return a / b
	}
	for i := range r.Systems {
		s := &r.Systems[i]
		for _, ref := range r.Systems {
			if ref.System == s.Ref {
				s.Ratio = ratio(s.OpsPerSec, ref.OpsPerSec)
				s.ServerCPURatio = ratio(s.ServerCPUPerOpUs, ref.ServerCPUPerOpUs)
				s.ClientCPURatio = ratio(s.ClientCPUPerOpUs, ref.ClientCPUPerOpUs)
			}
		}
	}
}

func median(runs []RunResult) Median {
	m := Median{Runs: runs}
	pick := func(f func(RunResult) float64) float64 {
		v := make([]float64, len(runs))
		for i, r := range runs {
			v[i] = f(r)
		}
		slices.Sort(v)
		if len(v) == 0 {
			return 0
		}
		if len(v)%2 == 1 {
			return v[len(v)/2]
		}
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	m.OpsPerSec = pick(func(r RunResult) float64 { return r.OpsPerSec })
	m.P50Ms = pick(func(r RunResult) float64 { return r.P50Ms })
	m.P99Ms = pick(func(r RunResult) float64 { return r.P99Ms })
	m.ServerCPUPerOpUs = pick(func(r RunResult) float64 { return r.ServerCPUPerOpUs })
	m.ClientCPUPerOpUs = pick(func(r RunResult) float64 { return r.ClientCPUPerOpUs })
	for _, r := range runs {
		m.Errors += r.Errors
	}
	return m
}

// Memory workload: a fresh fenced process, n live leases, then its RSS.
const (
	memConns      = 16 // client objects, each with its own connection
	memPerConn    = 64 // concurrent acquisitions on each
	memLeaseTTL   = time.Hour
	memPerOwner   = 50_000 // below the default --max-leases-per-owner (100,000)
	memSettleTime = 2 * time.Second
)

func runMemory(ctx context.Context, n int, dir, system, fencedBin string, maxLeases int, logf func(string, ...any)) (*Memory, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	logf("memory: starting a fresh %s", system)
	srv, err := startFenced(ctx, fencedBin, dir, maxLeases, nil)
	if err != nil {
		return nil, err
	}
	defer srv.stop(30 * time.Second)
	m := &Memory{System: system, Leases: n}
	if m.IdleRSS, _, err = srv.rss(); err != nil {
		return nil, err
	}
	logf("memory: fenced pid %d idle RSS %s; creating %d leases with TTL %v", srv.pid(), fmtBytes(m.IdleRSS), n, memLeaseTTL)

	// Stop at once if the server dies, rather than fail every remaining
	// acquisition.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-srv.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	start := time.Now()
	created, dialErr := createLeases(ctx, &fencedSystem{label: system, endpoints: []string{srv.endpoint}}, n, m, logf)
	if srv.exited() {
		return nil, fmt.Errorf("memory: fenced exited after %d leases (%v); its log ends:\n%s", created, srv.waitErr, srv.logTail())
	}
	if dialErr != nil {
		return nil, fmt.Errorf("memory: dial: %w", dialErr)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.CreateSeconds = time.Since(start).Seconds()
	m.Created = created
	gauge := func(ctx context.Context) (int64, error) { return fencedLeasesActive(ctx, srv.endpoint) }
	if err := measureMemory(ctx, srv, m, gauge, logf); err != nil {
		return nil, err
	}
	if m.Created == 0 {
		return nil, errors.New("memory: no lease was created: " + m.FirstError)
	}
	return m, nil
}

// createLeases creates leases 0..n-1 over memConns connections, memPerConn
// at a time on each, logging progress, and records failed acquisitions in
// m. It returns how many were created and why a connection could not be
// made, if one could not.
func createLeases(ctx context.Context, sys *fencedSystem, n int, m *Memory, logf func(string, ...any)) (int64, error) {
	var (
		next, created atomic.Int64
		errs          atomic.Uint64
		errOnce       sync.Once
		wg            sync.WaitGroup
	)
	defer logProgress(&created, n, "leases", logf)()
	var dialErr error
	for range memConns {
		c, err := sys.dial(ctx)
		if err != nil {
			dialErr = err
			break
		}
		fc := c.(*fencedConn)
		defer fc.close()
		for range memPerConn {
			wg.Go(func() {
				for i := next.Add(1) - 1; i < int64(n) && ctx.Err() == nil; i = next.Add(1) - 1 {
					// A new owner every memPerOwner leases stays below the
					// server's per-owner quota.
					l, err := fc.c.Acquire(ctx, fmt.Sprintf("fencedbench/memory/%08d", i), client.WithTTL(memLeaseTTL),
						client.WithOwner(fmt.Sprintf("fencedbench/%d", i/memPerOwner)))
					if err != nil {
						errs.Add(1)
						errOnce.Do(func() { m.FirstError = err.Error() })
						continue
					}
					// Stop renewing locally without releasing: the lease
					// stays live on the server for its TTL, and the harness
					// does not keep a million renewal timers.
					l.Orphan()
					created.Add(1)
				}
			})
		}
	}
	wg.Wait()
	m.Errors = errs.Load()
	return created.Load(), dialErr
}

// logProgress logs every 10s how many of n things (what) are created so
// far, and at what rate, until the returned function is called.
func logProgress(created *atomic.Int64, n int, what string, logf func(string, ...any)) (stop func()) {
	start, done := time.Now(), make(chan struct{})
	go func() {
		t := time.NewTicker(10 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				c := created.Load()
				logf("memory: %d/%d %s (%.0f/s)", c, n, what, float64(c)/time.Since(start).Seconds())
			}
		}
	}()
	return func() { close(done) }
}

// measureMemory lets the server settle, then reads its RSS and lease gauge
// into m.
func measureMemory(ctx context.Context, srv *server, m *Memory, gauge func(context.Context) (int64, error), logf func(string, ...any)) error {
	// Give the server a moment to finish what the last requests started
	// (snapshots, GC) before reading its RSS.
	select {
	case <-time.After(memSettleTime):
	case <-ctx.Done():
		return ctx.Err()
	}
	var err error
	if m.ActiveGauge, err = gauge(ctx); err != nil {
		logf("memory: cannot read the count of live leases: %v", err)
	}
	if m.RSS, m.PeakRSS, err = srv.rss(); err != nil {
		return err
	}
	if m.Created > 0 {
		m.BytesPerLease = float64(m.RSS-m.IdleRSS) / float64(m.Created)
	}
	logf("memory: %d leases in %.1fs (%.0f/s), %d errors; %s RSS %s (peak %s), %.0f bytes/lease over idle",
		m.Created, m.CreateSeconds, float64(m.Created)/m.CreateSeconds, m.Errors, m.System, fmtBytes(m.RSS), fmtBytes(m.PeakRSS), m.BytesPerLease)
	if m.Errors > 0 {
		logf("memory: first error: %s", m.FirstError)
	}
	return nil
}
