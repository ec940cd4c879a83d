package server

import (
	"testing"

	"github.com/hashicorp/raft"
)

// TestLogStoreIsMonotonicForRaft checks what raft sees of the node's log
// store: it must report the WAL's consecutive-index rule through every
// wrapper, or a follower that installs a snapshot past its log never empties
// it and stops at its next append.
func TestLogStoreIsMonotonicForRaft(t *testing.T) {
	srv, err := New(Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", RaftListen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if !srv.store.IsMonotonic() {
		t.Fatal("the WAL itself is not monotonic: this test's premise changed")
	}
	if m, ok := srv.raftLogs.(raft.MonotonicLogStore); !ok || !m.IsMonotonic() {
		t.Fatalf("raft's log store %T does not report IsMonotonic", srv.raftLogs)
	}
}
