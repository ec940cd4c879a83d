package torture

import (
	"strings"
	"testing"
	"time"
)

// TestUnknownKeysAreNotClean: a run whose linearizability check timed out
// on a key has not passed, even with no violation.
func TestUnknownKeysAreNotClean(t *testing.T) {
	r := &Report{Summary: Summary{Acquisitions: Counts{OK: 1}}}
	if !r.Passed() {
		t.Fatal("a run with grants and no violation failed")
	}
	r.UnknownKeys = 1
	if r.Passed() {
		t.Error("a run with a key of unknown result passed")
	}
	if v := r.verdict(); !strings.HasPrefix(v, "INCONCLUSIVE") {
		t.Errorf("verdict %q, want INCONCLUSIVE", v)
	}
}

// TestClusterTimingFromTTL: a cluster's election timeout defaults to TTL/4
// and may not exceed it.
func TestClusterTimingFromTTL(t *testing.T) {
	if !signalsSupported {
		t.Skip(errUnsupported)
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
