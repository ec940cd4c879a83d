package api

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/api/fenced/v1/fencedv1connect"
	"github.com/fencedio/fenced/lease"
	"github.com/fencedio/fenced/server/internal/apierr"
)

// TestAfterCut: a retried acquisition that finds the key held by its own
// owner, or no leader, leaves the outcome open (unavailable), since the
// try cut by the leader change may have been granted; a first try's answer
// and a holder with another owner stand.
func TestAfterCut(t *testing.T) {
	held := func(owner string) error {
		return apierr.Connect(&lease.HeldError{Key: "k", Owner: owner, Token: 7})
	}
	for _, tc := range []struct {
		name      string
		err       error
		attempt   int
		wantCode  connect.Code // 0: err unchanged
		wantMaybe bool
	}{
		{"first try held by self", held("me"), 0, 0, false},
		{"retry held by self", held("me"), 1, connect.CodeUnavailable, true},
		{"retry held by another", held("you"), 2, 0, false},
		{"retry without a leader", apierr.Connect(apierr.ErrNotReady), 1, connect.CodeUnavailable, true},
		{"retry refused as bad input", apierr.Connect(apierr.Invalidf("no")), 1, 0, false},
	} {
		got := retriedAcquireError(tc.err, tc.attempt, "me")
		if tc.wantCode == 0 {
			if got != tc.err {
				t.Errorf("%s: %v, want the answer unchanged", tc.name, got)
			}
			continue
		}
		if connect.CodeOf(got) != tc.wantCode || errors.Is(got, errMaybeGranted) != tc.wantMaybe {
			t.Errorf("%s: %v, want %v (maybe granted: %v)", tc.name, got, tc.wantCode, tc.wantMaybe)
		}
	}
	if retriedAcquireError(nil, 1, "me") != nil {
		t.Error("a grant on retry must stand")
	}
}

// deposedNode is a fakeNode whose Acquire writes a grant, then finds the
// node no longer leads: the call goes on at the leader, leader.
type deposedNode struct {
	*fakeNode
	leader *recordingLeader
}

func (n *deposedNode) Acquire(ctx context.Context, _, _ string, _, _ time.Duration) (lease.Lease, error) {
	ProposalsOf(ctx).Add("written-" + n.leader.name)
	n.leader.name = "deposed"
	return lease.Lease{}, apierr.ErrNotReady
}

func (n *deposedNode) Ready() bool   { return n.leader.name != "deposed" }
func (n *deposedNode) Leading() bool { return n.Ready() }

func (n *deposedNode) LeaseLeader(context.Context) (fencedv1connect.LeaseServiceClient, error) {
	return n.leader, nil
}

// recordingLeader is the leader's lease API, as another node reaches it:
// it records the headers of the acquisition it gets, and answers it
// unavailable.
type recordingLeader struct {
	fencedv1connect.LeaseServiceClient
	name string
	got  http.Header
}

func (l *recordingLeader) Acquire(_ context.Context, req *connect.Request[fencedv1.AcquireRequest]) (*connect.Response[fencedv1.AcquireResponse], error) {
	l.got = req.Header().Clone()
	return nil, apierr.Connect(apierr.ErrNotReady)
}

// An acquisition that goes on at another leader takes the grants it wrote
// here along (ProposalsHeader), and those it was sent with: the leader
// tells them from other leases of the same owner.
func TestContinuedAcquireCarriesItsProposals(t *testing.T) {
	leader := &recordingLeader{name: "here"}
	n := &deposedNode{fakeNode: newFakeNode(), leader: leader}
	d := n.deps()
	d.Leases, d.Leader, d.Forward = n, n, n
	req := connect.NewRequest(&fencedv1.AcquireRequest{Key: "k", Owner: "o", TtlMs: 1000, WaitMs: 5000})
	earlier := &Proposals{}
	earlier.Add("sent-along")
	req.Header().Set(ProposalsHeader, earlier.String())
	_, err := LeaseService(d).Acquire(context.Background(), req)
	if !errors.Is(err, apierr.ErrMaybeGranted) {
		t.Errorf("continued acquisition answered unavailable by the leader: %v, want maybe granted", err)
	}
	if leader.got == nil {
		t.Fatal("the acquisition did not go on at the leader")
	}
	got := ParseProposals(leader.got.Get(ProposalsHeader))
	for _, id := range []string{"written-here", "sent-along"} {
		if !got.Made(id) {
			t.Errorf("the leader was not told of the grant %s", id)
		}
	}
	if got.Made("another") {
		t.Error("the leader takes a lease the call never wrote for one of its grants")
	}
}
