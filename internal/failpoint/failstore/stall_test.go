//go:build fenced_failpoints

package failstore

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fencedio/fenced/internal/failpoint"
)

// TestLogStallHoldsWritesWhileTheFileExists: a write waits while the stall
// file exists, reports that it hangs, and goes through once it is removed;
// without the file writes go straight through.
func TestLogStallHoldsWritesWhileTheFileExists(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stall")
	t.Setenv(failpoint.LogStallEnvVar, path)
	s := WrapLogStore(raft.NewInmemStore())
	if err := s.StoreLogs([]*raft.Log{{Index: 1, Term: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.StoreLogs([]*raft.Log{{Index: 2, Term: 1}}) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(path + ".caught"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the hanging write never reported itself")
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case err := <-done:
		t.Fatalf("the write went through while the stall file existed (%v)", err)
	default:
	}
	if last, _ := s.LastIndex(); last != 1 {
		t.Fatalf("last index %d while the write hangs, want 1", last)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if last, _ := s.LastIndex(); last != 2 {
		t.Fatalf("last index %d after the stall, want 2", last)
	}
}
