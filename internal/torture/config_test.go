package torture

import (
	"strings"
	"testing"
	"time"

	"github.com/fencedio/fenced/internal/torture/proc"
)

// TestWorkerCommand: the first WorkerCommandWorkers workers run the worker
// command (all of them by default), the others the Go worker; bad counts
// are refused.
func TestWorkerCommand(t *testing.T) {
	if !proc.SignalsSupported {
		t.Skip(proc.ErrUnsupported)
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

// TestClusterTimingFromTTL: a cluster's election timeout defaults to TTL/4
// and may not exceed it.
func TestClusterTimingFromTTL(t *testing.T) {
	if !proc.SignalsSupported {
		t.Skip(proc.ErrUnsupported)
	}
	cfg := Config{Nodes: 3, TTL: 2 * time.Second, OutputDir: t.TempDir()}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if cfg.NodeHeartbeatTimeout != 500*time.Millisecond {
		t.Errorf("NodeHeartbeatTimeout %v, want TTL/4", cfg.NodeHeartbeatTimeout)
	}
	cfg = Config{Nodes: 3, TTL: time.Second, NodeHeartbeatTimeout: 300 * time.Millisecond, OutputDir: t.TempDir()}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "TTL/4") {
		t.Errorf("heartbeat of 0.3 TTL in a cluster: %v, want an error naming TTL/4", err)
	}
	cfg = Config{TTL: time.Second, NodeHeartbeatTimeout: 300 * time.Millisecond, OutputDir: t.TempDir()}
	if err := cfg.Validate(); err != nil {
		t.Errorf("a single node may keep a longer heartbeat: %v", err)
	}
}

// TestQueueConfig: "amqp" names the local broker, the queue path is off
// by default, and it needs PostgreSQL, whose guard the consumer uses.
func TestQueueConfig(t *testing.T) {
	if !proc.SignalsSupported {
		t.Skip(proc.ErrUnsupported)
	}
	cfg := Config{OutputDir: t.TempDir()}
	if err := cfg.Validate(); err != nil || cfg.QueueURL != "" {
		t.Fatalf("default: QueueURL %q, %v; want none", cfg.QueueURL, err)
	}
	cfg = Config{QueueURL: "amqp", PostgresDSN: "postgres://x", OutputDir: t.TempDir()}
	if err := cfg.Validate(); err != nil || cfg.QueueURL != DefaultQueueURL || cfg.QueueDelayShare != 0.2 {
		t.Errorf(`"amqp": QueueURL %q, delay share %v, %v`, cfg.QueueURL, cfg.QueueDelayShare, err)
	}
	for _, bad := range []Config{{QueueURL: "amqp"}, {QueueURL: "http://x", PostgresDSN: "postgres://x"}} {
		bad.OutputDir = t.TempDir()
		if err := bad.Validate(); err == nil {
			t.Errorf("QueueURL %q with PostgresDSN %q: accepted", bad.QueueURL, bad.PostgresDSN)
		}
	}
}
