package server

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/server/internal/fanout"
)

// Rejections are recorded by the leader (rejections.go), but Watch is
// served by every node. So that a watcher of any node gets REJECTED events,
// a node with at least one rejection watcher relays the leader's: it keeps
// one Watch of the leader's own rejections open over the peer port and
// publishes each one it receives into its hub, which queues it for its
// watchers like one of its own (bounded per watcher, as transitions are).
// The watchers' transitions still come from this node's applied log alone,
// and a relayed event carries this node's revision (deliverRejection), so
// resuming after a revision is not disturbed.
//
// The relay follows the leader: it is opened again when the leader changes
// or the stream breaks, and idle while this node leads. Rejections are not
// replayed: those the leader records while the relay is not open (from an
// election until this node opens the relay at the new leader, or while no
// leader is known) or that a relay falling behind loses are not relayed.

// relayHeader marks the Watch a node opens to relay the leader's
// rejections. It is honoured on the peer port only: authenticate removes it
// from calls on the public port.
const relayHeader = "Fenced-Rejection-Relay"

// relayPrincipal is the caller of a relay once auth is on: another node,
// trusted as the peer port is. It holds no permission; serveRelay needs
// none, as the relaying node authorizes each of its watchers.
var relayPrincipal = Principal{Name: "fenced-peer", Method: "peer"}

// rejectionRelay runs the relay while this node has rejection watchers.
type rejectionRelay struct {
	s        *Server
	mu       sync.Mutex
	watchers int
	stop     context.CancelFunc
}

// join counts a rejection watcher of this node, starting the relay for the
// first one; the function returned uncounts it, stopping the relay after
// the last one.
func (r *rejectionRelay) join() (leave func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.watchers++; r.watchers == 1 {
		ctx, cancel := context.WithCancel(r.s.baseContext())
		r.stop = cancel
		r.s.spawn(func() { r.run(ctx) })
	}
	return sync.OnceFunc(func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.watchers--; r.watchers == 0 {
			r.stop()
		}
	})
}

// run relays the rejections of whichever node leads until ctx ends.
func (r *rejectionRelay) run(ctx context.Context) {
	f := r.s.forward
	for ctx.Err() == nil {
		epoch := f.currentEpoch() // before the leader is read: ends on any later change
		addr, err := f.leaderAddr(ctx)
		if err == nil && addr != "" {
			err = r.follow(ctx, addr)
		}
		if err != nil && ctx.Err() == nil && epoch.Err() == nil {
			r.s.log.LogAttrs(ctx, slog.LevelDebug, "relay of the leader's rejections broken", slog.String("leader", addr), slog.Any("error", err))
		}
		// Here when this node leads (its own rejections reach its
		// watchers), when no leader is known, or when the relay broke: try
		// again on a leader change, or after a while.
		wait := time.NewTimer(r.s.cfg.HeartbeatTimeout)
		select {
		case <-ctx.Done():
		case <-epoch.Done():
		case <-wait.C:
		}
		wait.Stop()
	}
}

// follow relays the rejections the node at addr records until the stream
// ends, ctx ends or the leader changes.
func (r *rejectionRelay) follow(ctx context.Context, addr string) error {
	ctx, done := r.s.forward.bound(ctx)
	defer done()
	req := connect.NewRequest(&fencedv1.WatchRequest{Rejections: true})
	req.Header().Set(forwardedHeader, r.s.cfg.NodeID)
	req.Header().Set(relayHeader, "true")
	stream, err := r.s.forward.client(addr).Watch(ctx, req)
	if err != nil {
		return err
	}
	defer stream.Close()
	for stream.Receive() && ctx.Err() == nil {
		if ev := stream.Msg().GetEvent(); ev.GetType() == fencedv1.Event_REJECTED && ev.GetRejection() != nil {
			r.s.hub.PublishRelayed(rejectedEvent(ev.GetRejection(), 0))
		}
	}
	return stream.Err()
}

// currentEpoch returns the context that ends at the next leader change.
func (f *forwarder) currentEpoch() context.Context {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.epoch
}

// serveRelay serves another node's relay (a Watch with relayHeader, on the
// peer port): the rejections this node records, under every key, until ctx
// ends. The caller authorized its own watchers. A relay that falls behind
// is cut off from what it missed and goes on.
func (s *Server) serveRelay(ctx context.Context, stream *connect.ServerStream[fencedv1.WatchResponse]) error {
	ctl := streamControlFrom(ctx)
	sub := s.hub.SubscribeRelay()
	defer func() { s.hub.Unsubscribe(sub) }()
	for {
		var evs []*fanout.Event
		select {
		case <-ctx.Done():
			return nil
		case <-sub.Ready():
			evs = sub.Take()
		case <-sub.Lost():
			evs = sub.Take()
			sub = s.hub.SubscribeRelay()
		}
		for i, ev := range evs {
			ctl.beforeSend(s.cfg.StreamWriteTimeout, i < len(evs)-1)
			if err := stream.Send(ev.Message(0)); err != nil {
				return err
			}
		}
	}
}
