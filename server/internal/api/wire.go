package api

import (
	"time"

	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/lease"
)

// View says whose answer a lease goes into. The lease ID is the capability
// that renews and releases a lease (invariant I4), so it goes only to its
// holder: in the answers to Acquire, Renew and KeepAlive, which only this
// package gives. Everyone else (Get, List, Watch, the dashboard) sees the
// public view, which leaves it out.
type View bool

const (
	// PublicView leaves the lease ID out.
	PublicView View = false
	holderView View = true
)

// WireLease is the one conversion of a lease to its wire form; remaining is
// the time left as this node sees it (0 when not applicable).
func WireLease(l lease.Lease, remaining time.Duration, v View) *fencedv1.Lease {
	p := &fencedv1.Lease{Key: l.Key, Owner: l.Owner, Token: l.Token,
		TtlMs: l.TTL.Milliseconds(), RemainingMs: remaining.Milliseconds()}
	if v == holderView {
		p.LeaseId = &l.ID
	}
	return p
}

// renewedLease is WireLease for a lease just renewed: its full TTL is left.
func renewedLease(l lease.Lease) *fencedv1.Lease { return WireLease(l, l.TTL, holderView) }

// currentLease is WireLease for a current lease, with the time it has left.
func (d *Deps) currentLease(l lease.Lease, v View) *fencedv1.Lease {
	return WireLease(l, d.State.Remaining(l.Key), v)
}

// EventToProto is the wire form of a transition, with the lease in its
// public view.
func EventToProto(ev lease.Event) *fencedv1.Event {
	l := ev.Lease
	e := &fencedv1.Event{Revision: ev.Revision, Lease: WireLease(l, 0, PublicView)}
	switch ev.Type {
	case lease.Acquired:
		e.Type = fencedv1.Event_ACQUIRED
	case lease.Released:
		e.Type = fencedv1.Event_RELEASED
	case lease.Expired:
		e.Type = fencedv1.Event_EXPIRED
	}
	return e
}
