package server

import (
	"context"
	"errors"
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync"
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
	gate := make(chan struct{})
	var open sync.Once
	letThrough := func() { open.Do(func() { close(gate) }) }
	t.Cleanup(letThrough) // before Close
	store.gate <- gate

	type answer struct {
		l   *fencedv1.Lease
		err error
	}
	done := make(chan answer, 1)
	go func() {
		req := connect.NewRequest(&fencedv1.AcquireRequest{Key: "k", Owner: "o", TtlMs: 1100, WaitMs: 20_000})
		resp, err := s.leaseService().Acquire(ctx, req)
		if err != nil {
			done <- answer{nil, err}
			return
		}
		done <- answer{resp.Msg.GetLease(), nil}
	}()
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

	var a answer
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
