package server

import (
	"context"
	"errors"
	"maps"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/internal/testutil"
	"github.com/fencedio/fenced/lease"
	"github.com/fencedio/fenced/server/internal/api"
	"github.com/fencedio/fenced/server/internal/apierr"
	"github.com/hashicorp/raft"
)

// A waited Acquire whose grant is written but not yet committed when the
// leader loses its leadership goes on at the new leader. When that is the
// same node, re-elected, the grant commits after all: the continued wait
// must answer that the call may have been granted, never wait behind its
// own unseen lease and take the key a second time when that lease expires
// (one Acquire, two grants). The hook: the grant's log write is held while
// the node loses and regains its leadership, and let through while the
// continued call waits for the node to serve again.
func TestContinuedWaitFindsItsOwnGrant(t *testing.T) {
	store := &gatedLogStore{gate: make(chan chan struct{}, 1)}
	// awaitServing holds the continued call for up to a heartbeat timeout:
	// long enough for the steps below.
	s := newTestServer(t, Config{HeartbeatTimeout: 2 * time.Second, MinTTL: 1100 * time.Millisecond,
		wrapLogStore: func(ls raft.LogStore) raft.LogStore { store.LogStore = ls; return store },
	})
	ctx := context.Background()
	letThrough := store.hold(t)
	done := acquireAsync(ctx, s, &fencedv1.AcquireRequest{Key: "k", Owner: "o", TtlMs: 1100, WaitMs: 20_000})
	testutil.Eventually(t, 10*time.Second, func() error {
		if len(store.gate) != 0 {
			return errors.New("the grant's write has not started")
		}
		return nil
	})

	// Leadership lost and regained, as watchLeadership passes it on: the
	// waiting call is deposed and goes on at the new leader, this node.
	s.leaderMu.Lock()
	s.readyTerm.Store(0)
	s.expirer.Deactivate()
	s.setLeading(false)
	s.setLeading(true)
	s.leaderMu.Unlock()
	for !slices.ContainsFunc(slices.Collect(maps.Values(testutil.Goroutines())), func(g string) bool {
		return strings.Contains(g, "server.(*Server).awaitServing")
	}) {
		select {
		case a := <-done:
			t.Fatalf("answered before the call went on at the new leader: %v, %v", a.l, a.err)
		default:
			runtime.Gosched()
		}
	}

	letThrough() // the grant commits
	var unseen lease.Lease
	testutil.Eventually(t, 10*time.Second, func() error {
		var ok bool
		if unseen, ok = s.currentOf("k"); !ok {
			return errors.New("the grant has not been applied")
		}
		return nil
	})
	if !s.serveTerm(ctx, s.currentTerm()) {
		t.Fatal("the node did not serve")
	}

	var a acquireAnswer
	select {
	case a = <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("no answer")
	}
	if a.err == nil {
		t.Fatalf("one Acquire, two grants: tokens %d (unseen) then %d", unseen.Token, a.l.GetToken())
	}
	if connect.CodeOf(a.err) != connect.CodeUnavailable || !errors.Is(a.err, apierr.ErrMaybeGranted) {
		t.Fatalf("continued wait that finds its own grant: %v, want unavailable, maybe granted", a.err)
	}
	if cur, ok := s.currentOf("k"); !ok || cur.ID != unseen.ID {
		t.Errorf("the key is held by %+v, want the unseen grant still", cur)
	}
}

// acquireAnswer is the answer to an Acquire through a node's API.
type acquireAnswer struct {
	l   *fencedv1.Lease
	err error
}

// acquireAsync calls Acquire through s's API (forwarding included) and
// delivers its answer.
func acquireAsync(ctx context.Context, s *Server, req *fencedv1.AcquireRequest) <-chan acquireAnswer {
	done := make(chan acquireAnswer, 1)
	go func() {
		resp, err := s.leaseService().Acquire(ctx, connect.NewRequest(req))
		if err != nil {
			done <- acquireAnswer{nil, err}
			return
		}
		done <- acquireAnswer{resp.Msg.GetLease(), nil}
	}()
	return done
}

// A continued acquisition tells its own grants (api.Proposals) from other
// leases of the same owner: its own answers "maybe granted" at once;
// another's, or a call that wrote no grant, waits as any other.
func TestContinuedAcquireTellsItsGrantApart(t *testing.T) {
	s := newTestServer(t, Config{})
	ctx := context.Background()
	l, err := s.Acquire(ctx, "k", "o", time.Minute, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		proposed []string
		want     error
	}{
		{"its own grant", []string{newLeaseID(), l.ID}, apierr.ErrMaybeGranted},
		{"another call's lease, same owner", []string{newLeaseID()}, lease.ErrHeld},
		{"no grant written", nil, lease.ErrHeld},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &api.Proposals{}
			p.Add(tc.proposed...)
			const wait = 300 * time.Millisecond
			start := time.Now()
			_, err := s.Acquire(api.WithProposals(ctx, p), "k", "o", time.Minute, wait)
			took := time.Since(start)
			if !errors.Is(err, tc.want) {
				t.Fatalf("%v, want %v", err, tc.want)
			}
			if waited := took >= wait; waited != (tc.want == lease.ErrHeld) {
				t.Errorf("answered after %v of a %v wait", took, wait)
			}
		})
	}
}

// A waited retry of an Acquire whose first attempt was granted unseen (the
// answer lost) finds the owner's quota full of that very grant: the
// outcome is unknown, never resource_exhausted. It answers "held" by the
// caller's own owner (docs/protocol.md, section 3.8), or "maybe granted"
// when the call knows the grant is its own; a quota full of other leases
// still refuses.
func TestRetryIsNotRefusedForItsOwnGrant(t *testing.T) {
	s := newTestServer(t, Config{MaxLeasesPerOwner: 1})
	ctx := context.Background()
	first, err := s.Acquire(ctx, "k", "o", time.Minute, 0) // its answer lost
	if err != nil {
		t.Fatal(err)
	}
	proposed := func(ids ...string) context.Context {
		p := &api.Proposals{}
		p.Add(ids...)
		return api.WithProposals(ctx, p)
	}
	for _, tc := range []struct {
		name string
		ctx  context.Context
		key  string
		want connect.Code
	}{
		{"retry", ctx, "k", connect.CodeFailedPrecondition},
		{"retry knowing its grant", proposed(first.ID), "k", connect.CodeUnavailable},
		{"retry with other grants", proposed(newLeaseID()), "k", connect.CodeResourceExhausted},
		{"another key", ctx, "k2", connect.CodeResourceExhausted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Acquire(tc.ctx, tc.key, "o", time.Minute, time.Second)
			if got := connect.CodeOf(apierr.Connect(err)); got != tc.want {
				t.Fatalf("%v (%v), want %v", err, got, tc.want)
			}
			var held *lease.HeldError
			if tc.want == connect.CodeFailedPrecondition && (!errors.As(err, &held) || held.Owner != "o" || held.Token != first.Token) {
				t.Errorf("%v, want held by the caller's own owner, token %d", err, first.Token)
			}
		})
	}
}

// The same over the wire, for the limit on one client address's leases: a
// waited retry from the address whose only lease is the unseen grant gets
// failed_precondition naming its own owner, never resource_exhausted.
func TestRetryIsNotRefusedForItsOwnGrantPerClient(t *testing.T) {
	s := newTestServer(t, Config{MaxLeasesPerClient: 1})
	c := leaseClientFrom(t, serveTest(t, s), "127.0.0.2")
	acquire := func(waitMs int64) error {
		_, err := c.Acquire(context.Background(), connect.NewRequest(&fencedv1.AcquireRequest{Key: "k", Owner: "o", TtlMs: 60_000, WaitMs: waitMs}))
		return err
	}
	if err := acquire(0); err != nil { // its answer lost
		t.Fatal(err)
	}
	err := acquire(1000)
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeFailedPrecondition {
		t.Fatalf("waited retry: %v, want failed_precondition", err)
	}
	for _, d := range ce.Details() {
		if m, derr := d.Value(); derr == nil {
			if h, ok := m.(*fencedv1.LeaseHeld); ok && h.GetOwner() == "o" {
				return
			}
		}
	}
	t.Errorf("waited retry: %v, want LeaseHeld naming the caller's own owner", err)
}
