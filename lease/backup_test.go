package lease_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/fencedio/fenced/lease"
)

func TestBackupAndRebase(t *testing.T) {
	t.Parallel()
	s := lease.New(0)
	s.Apply(1, 0, lease.Command{Op: lease.OpAcquire, Key: "held", ID: "secret-id", Owner: "o", TTL: time.Second})
	s.Apply(2, 0, lease.Command{Op: lease.OpAcquire, Key: "freed", ID: "other-id", Owner: "o", TTL: time.Second})
	s.Apply(3, 0, lease.Command{Op: lease.OpRelease, Key: "freed", ID: "other-id"})
	var buf bytes.Buffer
	snap := s.Snapshot().Backup()
	if _, err := snap.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	if snap.Applied() != 3 {
		t.Errorf("backup at %d, want 3", snap.Applied())
	}
	if bytes.Contains(buf.Bytes(), []byte("secret-id")) {
		t.Error("the backup holds a lease ID")
	}
	// The original keeps its lease: Backup copies.
	if _, ok := s.Get("held"); !ok {
		t.Error("Backup ended a lease of the state it was taken from")
	}
	r, err := lease.Restore(&buf, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := r.Get("held"); ok || r.LastToken("held") != 1 || r.LastToken("freed") != 2 || r.Len() != 0 {
		t.Errorf("restored backup: held %v, tokens %d %d, %d leases", ok, r.LastToken("held"), r.LastToken("freed"), r.Len())
	}
	if err := r.Rebase(3); !errors.Is(err, lease.ErrRebase) {
		t.Errorf("rebase to the applied index: %v, want ErrRebase", err)
	}
	if err := r.Rebase(1003); err != nil {
		t.Fatal(err)
	}
	// An entry at or below the new start is ignored; the next one grants
	// with its own index.
	if res := r.Apply(1003, 1, lease.Command{Op: lease.OpAcquire, Key: "new", ID: "a", Owner: "o", TTL: time.Second}); res.Event.Type != 0 {
		t.Errorf("entry at the rebased index applied: %+v", res)
	}
	res := r.Apply(1004, 1, lease.Command{Op: lease.OpAcquire, Key: "held", ID: "b", Owner: "o", TTL: time.Second})
	if res.Err != nil || res.Event.Lease.Token != 1004 {
		t.Errorf("acquire after the rebase: %+v", res)
	}

	// Rebase ends the leases of a state that still has some.
	s2 := lease.New(0)
	s2.Apply(1, 0, lease.Command{Op: lease.OpAcquire, Key: "k", ID: "x", Owner: "o", TTL: time.Second})
	if err := s2.Rebase(10); err != nil || s2.Len() != 0 || s2.LastToken("k") != 1 || s2.Applied() != 10 {
		t.Errorf("rebase of a state with a lease: %v, %d leases, last token %d, applied %d", err, s2.Len(), s2.LastToken("k"), s2.Applied())
	}
}
