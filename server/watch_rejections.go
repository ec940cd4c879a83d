package server

import (
	"math"
	"strings"

	fencedv1 "github.com/fencedio/fenced/internal/gen/fenced/v1"
	"github.com/fencedio/fenced/lease"
)

// publishRejection queues a REJECTED event for the watchers that asked for
// rejections (WatchRequest.rejections). revision is the last transition
// applied when it was recorded; the event is not kept for replay.
func (h *hub) publishRejection(e *fencedv1.Rejection, revision uint64) {
	ev := &hubEvent{
		// Revision is internal here: above every revision, so that the Watch
		// loop never takes it for an event delivered before a resume.
		Event:     lease.Event{Lease: lease.Lease{Key: e.GetScope()}, Revision: math.MaxUint64},
		watch:     &fencedv1.WatchResponse{Event: rejectedEvent(e, revision)},
		rejection: true,
	}
	h.enqueue(hubItem{ev: ev})
}

// deliverRejection queues ev for the matching subscriptions that asked for
// rejections. Called by the dispatcher with h.mu held. A watcher whose
// queue is full is cut off and told to resync, as for transitions.
func (h *hub) deliverRejection(ev *hubEvent) {
	for s := range h.subs {
		if s.rejections.Load() && strings.HasPrefix(ev.Lease.Key, s.prefix) {
			h.offer(s, ev)
		}
	}
}
