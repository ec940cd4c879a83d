package server

import (
	"time"

	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/lease"
)

// view says whose answer a lease goes into. The lease ID is the capability
// that renews and releases a lease (invariant I4), so it goes only to its
// holder: in the answers to Acquire, Renew and KeepAlive. Everyone else (Get,
// List, Watch, the dashboard) sees the public view, which leaves it out.
type view bool

const (
	publicView view = false
	holderView view = true
)

// wireLease is the one conversion of a lease to its wire form; remaining is
// the time left as this node sees it (0 when not applicable).
func wireLease(l lease.Lease, remaining time.Duration, v view) *fencedv1.Lease {
	p := &fencedv1.Lease{Key: l.Key, Owner: l.Owner, Token: l.Token,
		TtlMs: l.TTL.Milliseconds(), RemainingMs: remaining.Milliseconds()}
	if v == holderView {
		p.LeaseId = &l.ID
	}
	return p
}

// renewedLease is wireLease for a lease just renewed: its full TTL is left.
func renewedLease(l lease.Lease) *fencedv1.Lease { return wireLease(l, l.TTL, holderView) }

// currentLease is wireLease for a current lease, with the time it has left.
func (s *Server) currentLease(l lease.Lease, v view) *fencedv1.Lease {
	return wireLease(l, s.expirer.Remaining(l.Key, s.expirer.Now()), v)
}

func eventToProto(ev lease.Event) *fencedv1.Event {
	l := ev.Lease
	e := &fencedv1.Event{Revision: ev.Revision, Lease: wireLease(l, 0, publicView)}
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
