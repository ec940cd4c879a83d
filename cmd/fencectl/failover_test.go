package main

import (
	"context"
	"github.com/fencedio/fenced/internal/testenv"
	"io"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestFailoverBench runs two trials of failover-bench on a real 3-node
// cluster: each trial must see a new leader grant an acquisition, and the
// held leases must survive both kills.
func TestFailoverBench(t *testing.T) {
	if testing.Short() {
		t.Skip("builds fenced and runs a cluster of processes")
	}
	testenv.SkipUnlessLong(t)
	bin := filepath.Join(t.TempDir(), "fenced")
	if out, err := exec.Command("go", "build", "-o", bin, "../fenced").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg := failoverConfig{fenced: bin, nodes: 3, trials: 2, holders: 2, settle: 500 * time.Millisecond,
		timeout: 30 * time.Second, dir: t.TempDir()}
	res, err := runFailoverBench(ctx, io.Discard, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.FirstAcquireMs) != 2 || res.Trials != 2 || res.Nodes != 3 {
		t.Fatalf("result %+v, want 2 trials on 3 nodes", res)
	}
	for _, ms := range res.FirstAcquireMs {
		if ms <= 0 || ms > float64(cfg.timeout.Milliseconds()) {
			t.Errorf("first acquisition %vms after the kill, want within (0, %v]", ms, cfg.timeout)
		}
	}
	if res.P50Ms > res.MaxMs || res.MaxMs != max(res.FirstAcquireMs[0], res.FirstAcquireMs[1]) {
		t.Errorf("p50 %v, max %v of %v", res.P50Ms, res.MaxMs, res.FirstAcquireMs)
	}
	if res.Holders != 2 || res.HoldersLost != 0 || res.HolderTTLMs != 10_000 {
		t.Errorf("holders %d (TTL %vms), lost %d: %v", res.Holders, res.HolderTTLMs, res.HoldersLost, res.Lost)
	}
}
