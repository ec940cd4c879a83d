package server

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/internal/testutil"
	"github.com/fencedio/fenced/lease"
	"github.com/fencedio/fenced/server/internal/apierr"
	"github.com/hashicorp/raft"
)

// A release or expiry that hands the key to a waiter, and whose write
// fails as a leader's does when it steps down with the entry in flight
// (raft.ErrLeadershipLost), may still be committed. The waiter must answer
// that it may have been granted, at once: never "held" by the lease that
// was ending, and never go on waiting, since a later grant would make one
// acquisition two grants. Then the entry commits, and the key is the
// waiter's, unseen, as its answer allowed.
func TestHandoverWithUnknownOutcome(t *testing.T) {
	for _, ending := range []string{"release", "expiry"} {
		t.Run(ending, func(t *testing.T) {
			store := &gatedLogStore{gate: make(chan chan struct{}, 1)}
			var lose atomic.Bool
			s := newTestServer(t, Config{
				wrapLogStore: func(ls raft.LogStore) raft.LogStore { store.LogStore = ls; return store },
				applyLost: func(c lease.Command) error {
					handover := c.NextID != "" || (len(c.Expiries) == 1 && c.Expiries[0].NextID != "")
					if handover && lose.CompareAndSwap(true, false) {
						return raft.ErrLeadershipLost
					}
					return nil
				},
			})
			ctx := context.Background()

			ttl := time.Minute
			if ending == "expiry" {
				ttl = time.Second // long enough to set the trap below; never renewed
			}
			a, err := s.Acquire(ctx, "k", "A", ttl, 0)
			if err != nil {
				t.Fatal(err)
			}
			done := acquireAsync(ctx, s, &fencedv1.AcquireRequest{Key: "k", Owner: "B", TtlMs: 60_000, WaitMs: 20_000})
			testutil.Eventually(t, 10*time.Second, func() error {
				if n := s.waiters.Waiting("k"); n != 1 {
					return fmt.Errorf("%d waiting, want B", n)
				}
				return nil
			})

			// The handover's write is held, and its outcome lost.
			letThrough := store.hold(t)
			lose.Store(true)
			if ending == "release" {
				if err := s.Release(ctx, "k", a.ID); !errors.Is(err, raft.ErrLeadershipLost) {
					t.Fatalf("release: %v, want its outcome lost", err)
				}
			}
			var b acquireAnswer
			select {
			case b = <-done:
			case <-time.After(15 * time.Second):
				t.Fatal("B not answered while the handover's outcome was unknown")
			}
			if b.err == nil {
				t.Fatalf("B granted %v before the handover was written", b.l)
			}
			if connect.CodeOf(b.err) != connect.CodeUnavailable || !errors.Is(b.err, apierr.ErrMaybeGranted) {
				t.Fatalf("B: %v, want unavailable, maybe granted", b.err)
			}
			if n := s.waiters.Waiting("k"); n != 0 {
				t.Fatalf("%d still waiting: a later handover could grant B a second time", n)
			}

			letThrough() // the handover commits after all
			testutil.Eventually(t, 10*time.Second, func() error {
				if cur, ok := s.currentOf("k"); !ok || cur.Owner != "B" {
					return fmt.Errorf("the key is held by %+v (%v), want B's unseen grant", cur, ok)
				}
				return nil
			})
			if cur, _ := s.currentOf("k"); cur.Token != a.Token+1 {
				t.Errorf("B's grant has token %d, want %d: the entry that ended A's lease", cur.Token, a.Token+1)
			}
		})
	}
}
