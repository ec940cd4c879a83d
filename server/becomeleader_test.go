package server

import (
	"context"
	"errors"
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/internal/testutil"
	"github.com/fencedio/fenced/lease"
	"github.com/fencedio/fenced/server/internal/api"
	"github.com/fencedio/fenced/server/internal/apierr"
)

// A run of becomeLeader must not reset the deadlines from a view of the
// state older than the reset: a lease granted in between would drop out of
// expiry tracking and never expire. Nor may a run whose leadership already
// ended (its context cancelled) reset anything: by then a newer run may
// track leases its stale view lacks. The hook grants a lease just before
// the reset, the window the two cases share.
func TestBecomeLeaderKeepsLeasesGrantedMeanwhile(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cancel bool
	}{{"current", false}, {"stale", true}} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestServer(t, Config{})
			ctx := context.Background()
			if _, err := s.Acquire(ctx, "early", "a", time.Minute, 0); err != nil {
				t.Fatal(err)
			}
			var (
				hookErr error
				hooked  bool
			)
			acquireLate := func() {
				hooked = true
				_, hookErr = s.Acquire(ctx, "late", "b", time.Minute, 0)
			}
			s.beforeLeaderReset = acquireLate
			runCtx, cancel := context.WithCancel(ctx)
			if tc.cancel {
				cancel()
			}
			s.becomeLeader(runCtx)
			cancel()
			if !hooked { // the stale run returned before the window
				acquireLate()
			}
			if hookErr != nil {
				t.Fatal(hookErr)
			}
			for _, key := range []string{"early", "late"} {
				if s.remainingAt(key, time.Now()) == 0 {
					t.Errorf("lease on %q is not tracked for expiry after becomeLeader", key)
				}
			}
			if !s.Ready() {
				t.Error("the node stopped serving")
			}
		})
	}
}

// A node serves only in the term its Barrier ran in: when the term moves on
// between the Barrier and the reset (the node lost and regained leadership
// while its watcher stalled), the entries of the leader in between may be
// missing from its state, so it runs a Barrier again in the new term.
func TestBecomeLeaderServesOnlyTheTermOfItsBarrier(t *testing.T) {
	s := newTestServer(t, Config{})
	base := s.raft.CurrentTerm()
	var later atomic.Uint64
	s.termOverride = func() uint64 { return base + later.Load() }
	barriers := 0
	s.beforeLeaderReset = func() {
		barriers++
		later.Store(2) // after the first Barrier: two elections later
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s.becomeLeader(ctx)
	if barriers != 2 {
		t.Errorf("%d Barriers before serving, want a second one in the new term", barriers)
	}
	if term := s.expirer.Term(); term != base+2 {
		t.Errorf("deadlines of term %d, want %d", term, base+2)
	}
}

// A node whose term moved on since it became ready (its watcher stalled
// while it lost and regained leadership) confirms nothing: a read could
// miss the entries of the leader in between, and a renewal could pass for
// a lease that leader ended.
func TestConfirmationNeedsTheReadyTerm(t *testing.T) {
	s := newTestServer(t, Config{})
	ctx := context.Background()
	l, err := s.Acquire(ctx, "k", "a", time.Minute, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.confirmRead(ctx); err != nil {
		t.Fatalf("confirmation in the ready term: %v", err)
	}
	base := s.raft.CurrentTerm()
	s.termOverride = func() uint64 { return base + 2 }
	if err := s.confirmRead(ctx); !errors.Is(err, apierr.ErrNotReady) {
		t.Errorf("read confirmed two terms after the ready one: %v, want apierr.ErrNotReady", err)
	}
	if _, err := s.Renew(ctx, "k", l.ID); !errors.Is(err, apierr.ErrNotReady) {
		t.Errorf("renewal two terms after the ready one: %v, want apierr.ErrNotReady", err)
	}
}

// A node whose term moved on since it became ready (a deposed leader that
// has not stepped down yet) does not answer "held" or "not held" from its state: a newer
// leader may have granted the key to someone else already, and the refusal
// would report a holder that is gone.
func TestHeldRefusalNeedsTheReadyTerm(t *testing.T) {
	s := newTestServer(t, Config{})
	ctx := context.Background()
	l, err := s.Acquire(ctx, "k", "a", time.Minute, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx, "k", "b", time.Minute, 0); !errors.Is(err, lease.ErrHeld) {
		t.Fatalf("acquire of a held key in the ready term: %v, want ErrHeld", err)
	}
	base := s.raft.CurrentTerm()
	s.termOverride = func() uint64 { return base + 2 }
	if _, err := s.Acquire(ctx, "k", "b", time.Minute, 0); !errors.Is(err, apierr.ErrNotReady) {
		t.Errorf("acquire of a held key two terms after the ready one: %v, want apierr.ErrNotReady", err)
	}
	if _, err := s.Acquire(ctx, "k", "b", time.Minute, 50*time.Millisecond); !errors.Is(err, apierr.ErrNotReady) {
		t.Errorf("waiting acquire of a held key two terms after the ready one: %v, want apierr.ErrNotReady", err)
	}
	if err := s.Release(ctx, "k", strings.Repeat("0", len(l.ID))); !errors.Is(err, apierr.ErrNotReady) {
		t.Errorf("release of a lease this node does not know, two terms after the ready one: %v, want apierr.ErrNotReady", err)
	}
}

// A call that reaches a node raft has just made leader, before the node
// serves (its Barrier not yet applied), waits until it serves rather than
// being refused: the waiting acquisition an old leader passes on when it
// steps down lands in exactly that window, and a refusal there would end
// the wait with an unknown outcome.
func TestCallAtANewLeaderWaitsUntilItServes(t *testing.T) {
	// A heartbeat timeout (awaitServing's bound) far longer than the
	// test's steps, so that only a refusal can end the call early.
	s := newTestServer(t, Config{HeartbeatTimeout: time.Second, MinTTL: time.Second})
	ctx := context.Background()
	s.leaderMu.Lock()
	s.readyTerm.Store(0)
	s.setLeading(true) // raft's word that this node leads, as watchLeadership passes it on
	s.leaderMu.Unlock()

	r := s.leaseService()
	req := connect.NewRequest(&fencedv1.AcquireRequest{Key: "k", Owner: "w", TtlMs: 60_000, WaitMs: 5_000})
	req.Header().Set(api.ForwardedHeader, "n9")
	done := make(chan error, 1)
	go func() {
		_, err := r.Acquire(ctx, req)
		done <- err
	}()
	for !slices.ContainsFunc(slices.Collect(maps.Values(testutil.Goroutines())), func(g string) bool {
		return strings.Contains(g, "server.(*Server).awaitServing")
	}) {
		select {
		case err := <-done:
			t.Fatalf("answered before the node served: %v", err)
		default:
			runtime.Gosched()
		}
	}
	if !s.serveTerm(ctx, s.currentTerm()) {
		t.Fatal("the node did not serve")
	}
	if err := <-done; err != nil {
		t.Fatalf("acquisition at a new leader once it serves: %v", err)
	}
}
