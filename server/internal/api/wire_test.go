package api

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/lease"
)

// The lease ID goes only to the holder (invariant I4): never in the public
// view, always in the holder's.
func TestPublicViewLeavesTheIDOut(t *testing.T) {
	l := lease.Lease{Key: "k", ID: "secret", Owner: "o", Token: 3, TTL: 2 * time.Second}
	if p := WireLease(l, time.Second, PublicView); p.LeaseId != nil {
		t.Errorf("public view carries lease ID %q", p.GetLeaseId())
	}
	p := WireLease(l, time.Second, holderView)
	if p.GetLeaseId() != "secret" || p.GetKey() != "k" || p.GetOwner() != "o" || p.GetToken() != 3 ||
		p.GetTtlMs() != 2000 || p.GetRemainingMs() != 1000 {
		t.Errorf("holder view %v", p)
	}
	if p := renewedLease(l); p.GetLeaseId() != "secret" || p.GetRemainingMs() != 2000 {
		t.Errorf("renewed lease %v: want the ID and the full TTL left", p)
	}
	for _, typ := range []lease.EventType{lease.Acquired, lease.Released, lease.Expired} {
		if e := EventToProto(lease.Event{Type: typ, Revision: 9, Lease: l}); e.GetLease().LeaseId != nil || e.GetRevision() != 9 {
			t.Errorf("event %v carries lease ID %q", e, e.GetLease().GetLeaseId())
		}
	}
}

// Only the answers to the holder's own calls carry the lease ID: Acquire,
// Renew and KeepAlive; Get, List and Revoke do not.
func TestHandlersViews(t *testing.T) {
	ctx := context.Background()
	v := LeaseService(newFakeNode("held").deps())
	acq, err := v.Acquire(ctx, connect.NewRequest(&fencedv1.AcquireRequest{Key: "k", Owner: "o", TtlMs: 60_000}))
	if err != nil || acq.Msg.GetLease().GetLeaseId() == "" {
		t.Fatalf("Acquire: %v %v, want the lease with its ID", acq, err)
	}
	id := acq.Msg.GetLease().GetLeaseId()
	ren, err := v.Renew(ctx, connect.NewRequest(&fencedv1.RenewRequest{Key: "k", LeaseId: id}))
	if err != nil || ren.Msg.GetLease().GetLeaseId() != id {
		t.Fatalf("Renew: %v %v, want the lease with its ID", ren, err)
	}
	get, err := v.Get(ctx, connect.NewRequest(&fencedv1.GetRequest{Key: "k"}))
	if err != nil || get.Msg.GetLease().GetKey() != "k" || get.Msg.GetLease().LeaseId != nil {
		t.Fatalf("Get: %v %v, want the lease without its ID", get, err)
	}
	list, err := v.List(ctx, connect.NewRequest(&fencedv1.ListRequest{}))
	if err != nil || len(list.Msg.GetLeases()) != 2 {
		t.Fatalf("List: %v %v, want 2 leases", list, err)
	}
	for _, l := range list.Msg.GetLeases() {
		if l.LeaseId != nil {
			t.Errorf("List carries the ID of %s", l.GetKey())
		}
	}
	rev, err := AdminService(newFakeNode("k").deps()).Revoke(ctx, connect.NewRequest(&fencedv1.RevokeRequest{Key: "k"}))
	if err != nil || rev.Msg.GetLease().GetKey() != "k" || rev.Msg.GetLease().LeaseId != nil {
		t.Fatalf("Revoke: %v %v, want the lease without its ID", rev, err)
	}
}

// Bad input is refused with invalid_argument before the node sees it;
// the node's domain errors reach the caller through apierr.Connect.
func TestHandlersRefuse(t *testing.T) {
	ctx := context.Background()
	node := newFakeNode("held")
	v := LeaseService(node.deps())
	for name, err := range map[string]error{
		"Acquire of an empty key": func() error {
			_, err := v.Acquire(ctx, connect.NewRequest(&fencedv1.AcquireRequest{Owner: "o", TtlMs: 1000}))
			return err
		}(),
		"Acquire beyond every TTL": func() error {
			_, err := v.Acquire(ctx, connect.NewRequest(&fencedv1.AcquireRequest{Key: "k", TtlMs: 1 << 62}))
			return err
		}(),
		"List with a negative limit": func() error {
			_, err := v.List(ctx, connect.NewRequest(&fencedv1.ListRequest{Limit: -1}))
			return err
		}(),
		"Get of a bad key": func() error {
			_, err := v.Get(ctx, connect.NewRequest(&fencedv1.GetRequest{Key: "a\x00"}))
			return err
		}(),
	} {
		if connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("%s: %v, want invalid_argument", name, err)
		}
	}
	if _, err := v.Acquire(ctx, connect.NewRequest(&fencedv1.AcquireRequest{Key: "held", Owner: "o", TtlMs: 1000})); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("Acquire of a held key: %v, want failed_precondition", err)
	}
	if _, err := v.Release(ctx, connect.NewRequest(&fencedv1.ReleaseRequest{Key: "held", LeaseId: "other"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("Release of another lease: %v, want not_found", err)
	}
	if node.counts["acquisition"] != 3 || node.counts["release"] != 1 {
		t.Errorf("counted %v, want 3 acquisitions and 1 release", node.counts)
	}
}
