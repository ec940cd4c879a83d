package torture

import (
	"testing"
	"time"
)

func TestCheckClientDeadline(t *testing.T) {
	ms := int64(time.Millisecond)
	grant := &Op{Worker: 1, Seq: 1, Kind: KindAcquire, Key: "k", LeaseID: "L", Token: 7, TTLMs: 1000,
		Call: 1000 * ms, Return: 1200 * ms, Outcome: OK}
	renew := &Op{Worker: 1, Seq: 2, Kind: KindRenew, Key: "k", LeaseID: "L", Token: 7, TTLMs: 1000,
		Call: 1500 * ms, Return: 1900 * ms, Outcome: OK}
	write := func(seq int64, call, deadline int64) *Op {
		return &Op{Worker: 1, Seq: seq, Kind: KindSQL, Key: "k", Token: 7, Call: call * ms, Return: call*ms + ms,
			Outcome: OK, Deadline: deadline * ms}
	}
	for _, tc := range []struct {
		name       string
		write      *Op
		violations int
	}{
		{"from the grant's send", write(3, 1300, 1989), 0},
		{"from the grant's answer", write(3, 1300, 2189), 1},
		// The renewal was not answered when the write began: it cannot count.
		{"from a renewal still in flight", write(3, 1600, 2489), 1},
		{"from the renewal's send", write(3, 2000, 2489), 0},
		{"no deadline recorded", write(3, 1300, 0), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := CheckClientDeadline(NewHistory([]*Op{grant, renew, tc.write}))
			if r.Violations != tc.violations {
				t.Errorf("violations = %d, want %d: %v", r.Violations, tc.violations, r.Examples)
			}
		})
	}
}

// TestWorkerCommand: the first WorkerCommandWorkers workers run the worker
// command (all of them by default), the others the Go worker; bad counts
// are refused.
func TestWorkerCommand(t *testing.T) {
	if !signalsSupported {
		t.Skip(errUnsupported)
	}
	for _, tc := range []struct {
		n       int
		foreign []bool
	}{
		{0, []bool{true, true, true}},
		{2, []bool{true, true, false}},
	} {
		cfg := Config{Workers: 3, WorkerCommand: []string{"python3", "-m", "fenced.torture_worker"}, WorkerCommandWorkers: tc.n,
			OutputDir: t.TempDir()}
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		e := &engine{cfg: cfg}
		for id, want := range tc.foreign {
			if got := e.foreignWorker(id); got != want {
				t.Errorf("WorkerCommandWorkers %d: worker %d foreign = %v, want %v", tc.n, id, got, want)
			}
		}
	}
	for _, cfg := range []Config{
		{Workers: 3, WorkerCommand: []string{"w"}, WorkerCommandWorkers: 4},
		{Workers: 3, WorkerCommandWorkers: 1},
	} {
		cfg.OutputDir = t.TempDir()
		if err := cfg.Validate(); err == nil {
			t.Errorf("%d of %d workers with command %q: accepted", cfg.WorkerCommandWorkers, cfg.Workers, cfg.WorkerCommand)
		}
	}
}
