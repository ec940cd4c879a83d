package server

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/server/internal/apierr"
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
		if connect.CodeOf(apierr.Connect(err)) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), quota) {
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
	for s.waiters.Len() != 1 {
		if time.Now().After(deadline) {
			t.Fatal("first waiter never queued")
		}
		time.Sleep(5 * time.Millisecond)
	}
	exhausted(acquire("b", "bob", 10_000), "max-waiters-per-owner")
	if err := acquire("b", "carol", 50); err == nil || connect.CodeOf(apierr.Connect(err)) != connect.CodeFailedPrecondition {
		t.Fatalf("another owner's wait: %v, want held after its wait", err)
	}
	// The release hands "a" to bob, who now holds two leases; his line
	// is given back.
	l := s.fsm.View().List("a", 1)[0]
	if err := s.Release(ctx, "a", l.ID); err != nil {
		t.Fatal(err)
	}
	if err := <-waiting; err != nil {
		t.Fatalf("bob's wait: %v", err)
	}
	exhausted(acquire("d", "bob", 0), "max-leases-per-owner")
	if left := s.waiters.OfHolder("bob"); left != 0 {
		t.Fatalf("bob still counted as %d waiters after his wait ended", left)
	}
}

// With auth on, quotas belong to the principal: one that may name any
// owner cannot dodge them by naming a new owner for every lease or every
// wait, and a refusal changes nothing. A released lease frees its place.
func TestPrincipalQuotas(t *testing.T) {
	const bossSecret = "boss-0123456789abcdef0123456789abcdef"
	policy := writePolicy(t, fmt.Sprintf(`{
  "tokens": [{"principal": "alice", "sha256": %q}, {"principal": "boss", "sha256": %q}],
  "rules": [
    {"principal": "alice", "prefix": "q/", "permissions": ["acquire", "renew"]},
    {"principal": "boss", "prefix": "q/", "permissions": ["acquire", "renew", "owner"]}
  ]
}`, HashSecret(aliceSecret), HashSecret(bossSecret)))
	s, base := serveAPI(t, Config{AuthFile: policy, MaxLeasesPerOwner: 2, MaxWaitersPerOwner: 1})
	ctx := context.Background()
	alice, boss := newCaller(base, nil, aliceSecret), newCaller(base, nil, bossSecret)
	acquire := func(c caller, key, owner string, waitMs int64) (*fencedv1.Lease, error) {
		r, err := c.lease.Acquire(ctx, connect.NewRequest(&fencedv1.AcquireRequest{Key: key, Owner: owner, TtlMs: 60_000, WaitMs: waitMs}))
		if err != nil {
			return nil, err
		}
		return r.Msg.GetLease(), nil
	}
	refused := func(err error, want string) {
		t.Helper()
		if codeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), want) {
			t.Fatalf("%v, want resource_exhausted naming %s", err, want)
		}
	}

	var held []*fencedv1.Lease
	for i, owner := range []string{"o1", "o2"} {
		l, err := acquire(boss, fmt.Sprintf("q/%d", i), owner, 0)
		if err != nil || l.GetOwner() != owner {
			t.Fatalf("boss acquires as %s: %v %v", owner, l, err)
		}
		held = append(held, l)
	}
	before := s.fsm.View().Applied()
	_, err := acquire(boss, "q/2", "o3", 0)
	refused(err, `quota max-leases-per-owner exceeded: principal "boss" has 2 (limit 2)`)
	_, err = acquire(boss, "q/2", "o3", 1000)
	refused(err, `principal "boss"`)
	if got := s.fsm.View().Applied(); got != before {
		t.Fatalf("refusals moved the log from %d to %d", before, got)
	}
	if _, ok := s.currentOf("q/2"); ok {
		t.Fatal("q/2 granted beyond the quota")
	}
	// Another principal's quota is its own.
	if _, err := acquire(alice, "q/a1", "", 0); err != nil {
		t.Fatalf("alice: %v", err)
	}
	if _, err := acquire(alice, "q/a2", "o9", 0); err != nil {
		t.Fatalf("alice naming an owner (recorded as alice): %v", err)
	}
	_, err = acquire(alice, "q/a3", "", 0)
	refused(err, `principal "alice" has 2`)

	// A release frees a place.
	if _, err := boss.lease.Release(ctx, connect.NewRequest(&fencedv1.ReleaseRequest{Key: "q/0", LeaseId: held[0].GetLeaseId()})); err != nil {
		t.Fatal(err)
	}
	if _, err := acquire(boss, "q/2", "o3", 0); err != nil {
		t.Fatalf("boss after a release: %v", err)
	}

	// Waiters: boss may wait in one line, whatever owners it names.
	if _, err := boss.lease.Release(ctx, connect.NewRequest(&fencedv1.ReleaseRequest{Key: "q/1", LeaseId: held[1].GetLeaseId()})); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { _, err := acquire(boss, "q/a1", "w1", 30_000); waited <- err }()
	for deadline := time.Now().Add(10 * time.Second); s.waiters.Waiting("q/a1") == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("boss never queued for q/a1")
		}
	}
	_, err = acquire(boss, "q/a2", "w2", 30_000)
	refused(err, `quota max-waiters-per-owner exceeded: principal "boss" has 1 (limit 1)`)
	if n := s.waiters.Waiting("q/a2"); n != 0 {
		t.Fatalf("%d waiters queued for q/a2 beyond the quota", n)
	}
}
