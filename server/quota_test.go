package server

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
)

func TestOwnerQuotas(t *testing.T) {
	s := newTestServer(t, Config{MaxLeasesPerOwner: 2, MaxWaitersPerOwner: 1})
	ctx := context.Background()
	acquire := func(key, owner string, waitMs int64) error {
		_, err := s.Acquire(ctx, key, owner, time.Minute, time.Duration(waitMs)*time.Millisecond)
		return err
	}
	exhausted := func(err error, quota string) {
		t.Helper()
		if connect.CodeOf(connectError(err)) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), quota) {
			t.Fatalf("%v, want resource_exhausted naming %s", err, quota)
		}
	}
	for _, k := range []string{"a", "b"} {
		if err := acquire(k, "alice", 0); err != nil {
			t.Fatal(err)
		}
	}
	exhausted(acquire("c", "alice", 0), "max-leases-per-owner")
	exhausted(acquire("c", "alice", 1000), "max-leases-per-owner")
	if err := acquire("c", "bob", 0); err != nil {
		t.Fatalf("another owner: %v", err)
	}

	// Waiters: bob may wait in one line at a time.
	waiting := make(chan error, 1)
	go func() { waiting <- acquire("a", "bob", 10_000) }()
	deadline := time.Now().Add(10 * time.Second)
	for s.waiters.len() != 1 {
		if time.Now().After(deadline) {
			t.Fatal("first waiter never queued")
		}
		time.Sleep(5 * time.Millisecond)
	}
	exhausted(acquire("b", "bob", 10_000), "max-waiters-per-owner")
	if err := acquire("b", "carol", 50); err == nil || connect.CodeOf(connectError(err)) != connect.CodeFailedPrecondition {
		t.Fatalf("another owner's wait: %v, want held after its wait", err)
	}
	// The release hands "a" to bob, who now holds two leases; his line
	// is given back.
	l := s.fsm.view().List("a", 1)[0]
	if err := s.Release(ctx, "a", l.ID); err != nil {
		t.Fatal(err)
	}
	if err := <-waiting; err != nil {
		t.Fatalf("bob's wait: %v", err)
	}
	exhausted(acquire("d", "bob", 0), "max-leases-per-owner")
	s.waiters.mu.Lock()
	left := s.waiters.byOwner["bob"]
	s.waiters.mu.Unlock()
	if left != 0 {
		t.Fatalf("bob still counted as %d waiters after his wait ended", left)
	}
}
