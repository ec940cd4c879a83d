package server

import (
	"math"
	"strings"

	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/lease"
	"google.golang.org/protobuf/proto"
)

// publishRejection queues a REJECTED event, recorded by this node, for the
// watchers that asked for rejections (WatchRequest.rejections) and for the
// other nodes that relay them (rejection_relay.go). It is not kept for
// replay.
func (h *hub) publishRejection(e *fencedv1.Rejection) {
	h.enqueue(hubItem{ev: rejectionEvent(e, false)})
}

// publishRelayed queues a REJECTED event recorded by the leader and relayed
// to this node, for this node's rejection watchers only.
func (h *hub) publishRelayed(e *fencedv1.Rejection) { h.enqueue(hubItem{ev: rejectionEvent(e, true)}) }

func rejectionEvent(e *fencedv1.Rejection, relayed bool) *hubEvent {
	return &hubEvent{
		// Revision is internal here: above every revision, so that the Watch
		// loop never takes it for an event delivered before a resume. The
		// revision sent is set by the dispatcher (deliverRejection).
		Event:     lease.Event{Lease: lease.Lease{Key: e.GetScope()}, Revision: math.MaxUint64},
		watch:     &fencedv1.WatchResponse{Event: rejectedEvent(e, 0)},
		rejection: true,
		relayed:   relayed,
	}
}

// deliverRejection queues ev for the matching subscriptions that asked for
// rejections; a relayed event is never relayed again. Called by the
// dispatcher with h.mu held. A watcher whose queue is full is cut off and
// told to resync, as for transitions.
//
// The event's revision is that of the last transition dispatched before it,
// whoever recorded the rejection: every transition up to it is queued
// before it, so a watcher that resumes after it misses nothing.
func (h *hub) deliverRejection(ev *hubEvent) {
	ev.watch.Event.Revision = max(h.last, 1)
	for s := range h.subs {
		if s.rejections.Load() && !(ev.relayed && s.relay) && strings.HasPrefix(ev.Lease.Key, s.prefix) {
			h.offer(s, []*hubEvent{ev})
		}
	}
}

// subscribeRelay registers the subscription of another node's relay: the
// rejections this node records, under every key, and no transitions.
func (h *hub) subscribeRelay() *subscription {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := &subscription{relay: true, ready: make(chan struct{}, 1), lost: make(chan struct{})}
	s.rejections.Store(true)
	h.subs[s] = struct{}{}
	return s
}

// watchMessage is ev's Watch message for a watcher that resumed after
// revision after. A REJECTED event queued while this node was still behind
// that revision carries it instead of its own, so that the revisions a
// watcher sees never go back.
func watchMessage(ev *hubEvent, after uint64) *fencedv1.WatchResponse {
	if !ev.rejection || ev.watch.GetEvent().GetRevision() >= after {
		return ev.watch
	}
	e := proto.CloneOf(ev.watch.GetEvent())
	e.Revision = after
	return &fencedv1.WatchResponse{Event: e}
}
