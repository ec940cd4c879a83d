package fanout

import (
	"math"
	"strings"

	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/lease"
	"google.golang.org/protobuf/proto"
)

// PublishRejection queues ev, the REJECTED event of a rejection this node
// recorded, for the watchers that asked for rejections
// (WatchRequest.rejections) and for the other nodes that relay them
// (SubscribeRelay). It is not kept for replay. Its revision is set when it
// is dispatched.
func (h *Hub) PublishRejection(ev *fencedv1.Event) {
	h.enqueue(item{ev: rejectionEvent(ev, false)}, true)
}

// PublishRelayed queues ev, the REJECTED event of a rejection recorded by
// the leader and relayed to this node, for this node's rejection watchers
// only.
func (h *Hub) PublishRelayed(ev *fencedv1.Event) { h.enqueue(item{ev: rejectionEvent(ev, true)}, true) }

func rejectionEvent(e *fencedv1.Event, relayed bool) *Event {
	return &Event{
		// Revision is internal here: above every revision, so that the Watch
		// loop never takes it for an event delivered before a resume. The
		// revision sent is set by the dispatcher (deliverRejection).
		Event:     lease.Event{Lease: lease.Lease{Key: e.GetRejection().GetScope()}, Revision: math.MaxUint64},
		watch:     &fencedv1.WatchResponse{Event: e},
		rejection: true,
		relayed:   relayed,
	}
}

// IsRejection reports whether ev is a REJECTED event, which is not a
// transition: its revision is not its own (see Message).
func (ev *Event) IsRejection() bool { return ev.rejection }

// deliverRejection queues ev for the matching subscriptions that asked for
// rejections; a relayed event is never relayed again. Called by the
// dispatcher with h.mu held. A watcher whose queue is full is cut off and
// told to resync, as for transitions.
//
// The event's revision is that of the last transition dispatched before it,
// whoever recorded the rejection: every transition up to it is queued
// before it, so a watcher that resumes after it misses nothing.
func (h *Hub) deliverRejection(ev *Event) {
	ev.watch.Event.Revision = max(h.last, 1)
	for s := range h.subs {
		if s.rejections.Load() && !(ev.relayed && s.relay) && strings.HasPrefix(ev.Lease.Key, s.prefix) {
			h.offer(s, []*Event{ev})
		}
	}
}

// SubscribeRelay registers the subscription of another node's relay: the
// rejections this node records, under every key, and no transitions.
func (h *Hub) SubscribeRelay() *Subscription {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := newSubscription("", 0)
	s.relay = true
	s.rejections.Store(true)
	h.join(s, false)
	return s
}

// Message is ev's Watch message for a watcher that resumed after revision
// after (0: the message shared by every watcher). A REJECTED event queued
// while this node was still behind that revision carries it instead of its
// own, so that the revisions a watcher sees never go back.
func (ev *Event) Message(after uint64) *fencedv1.WatchResponse {
	if !ev.rejection || ev.watch.GetEvent().GetRevision() >= after {
		return ev.watch
	}
	e := proto.CloneOf(ev.watch.GetEvent())
	e.Revision = after
	return &fencedv1.WatchResponse{Event: e}
}
