package rejections

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/server/internal/fanout"
	"github.com/fencedio/fenced/server/internal/streamwrite"
)

// Rejections are recorded by the leader, but Watch is served by every
// node. So that a watcher of any node gets REJECTED events, a node with at
// least one rejection watcher relays the leader's: it keeps one Watch of
// the leader's own rejections open over the peer port and publishes each
// one it receives for its watchers, like one of its own.
//
// The relay follows the leader: it is opened again when the leader changes
// or the stream breaks, and idle while this node leads.

// RelayHeader marks the Watch a node opens to relay the leader's
// rejections. The node honours it on the peer port only.
const RelayHeader = "Fenced-Rejection-Relay"

// Leader is the node's view of who leads, and its way to call the leader.
type Leader interface {
	// Epoch returns the context that ends at the next leader change.
	Epoch() context.Context
	// Addr returns the leader's peer address, or "" when this node leads.
	Addr(ctx context.Context) (string, error)
	// Watch opens req at the node at addr, as one node calling another.
	Watch(ctx context.Context, addr string, req *connect.Request[fencedv1.WatchRequest]) (*connect.ServerStreamForClient[fencedv1.WatchResponse], error)
}

// Relay runs the relay while this node has rejection watchers. Its fields
// are set before its first Join.
type Relay struct {
	Base    context.Context   // the node's: the relay ends with it
	Spawn   func(func()) bool // runs the relay in a goroutine the node's shutdown waits for
	Leader  Leader
	Publish func(*fencedv1.Rejection) // hands a relayed rejection to this node's watchers
	Retry   time.Duration             // the wait before following again, absent a leader change
	Log     *slog.Logger

	mu       sync.Mutex
	watchers int
	stop     context.CancelFunc
}

// Join counts a rejection watcher of this node, starting the relay for the
// first one; the function returned uncounts it, stopping the relay after
// the last one.
func (r *Relay) Join() (leave func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.watchers++; r.watchers == 1 {
		ctx, cancel := context.WithCancel(r.Base)
		r.stop = cancel
		r.Spawn(func() { r.run(ctx) })
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
func (r *Relay) run(ctx context.Context) {
	for ctx.Err() == nil {
		epoch := r.Leader.Epoch() // before the leader is read: ends on any later change
		addr, err := r.Leader.Addr(ctx)
		if err == nil && addr != "" {
			err = r.follow(ctx, epoch, addr)
		}
		if err != nil && ctx.Err() == nil && epoch.Err() == nil {
			r.Log.LogAttrs(ctx, slog.LevelDebug, "relay of the leader's rejections broken", slog.String("leader", addr), slog.Any("error", err))
		}
		// Here when this node leads (its own rejections reach its
		// watchers), when no leader is known, or when the relay broke: try
		// again on a leader change, or after a while.
		wait := time.NewTimer(r.Retry)
		select {
		case <-ctx.Done():
		case <-epoch.Done():
		case <-wait.C:
		}
		wait.Stop()
	}
}

// follow relays the rejections the node at addr records until the stream
// ends, ctx ends or epoch, the leader's, ends.
func (r *Relay) follow(ctx, epoch context.Context, addr string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(epoch, cancel)()
	req := connect.NewRequest(&fencedv1.WatchRequest{Rejections: true})
	req.Header().Set(RelayHeader, "true")
	stream, err := r.Leader.Watch(ctx, addr, req)
	if err != nil {
		return err
	}
	defer stream.Close()
	for stream.Receive() && ctx.Err() == nil {
		if ev := stream.Msg().GetEvent(); ev.GetType() == fencedv1.Event_REJECTED && ev.GetRejection() != nil {
			r.Publish(ev.GetRejection())
		}
	}
	return stream.Err()
}

// ServeRelay serves another node's relay (a Watch with RelayHeader, on the
// peer port): the rejections recorded by the node of hub, under every
// key, until ctx ends, each send within writeTimeout (streamwrite). The
// caller authorized its own watchers. A relay that falls behind is cut off
// from what it missed and goes on.
func ServeRelay(ctx context.Context, hub *fanout.Hub, writeTimeout time.Duration, stream *connect.ServerStream[fencedv1.WatchResponse]) error {
	ctl := streamwrite.From(ctx)
	sub := hub.SubscribeRelay()
	defer func() { hub.Unsubscribe(sub) }()
	for {
		var evs []*fanout.Event
		select {
		case <-ctx.Done():
			return nil
		case <-sub.Ready():
			evs = sub.Take()
		case <-sub.Lost():
			evs = sub.Take()
			sub = hub.SubscribeRelay()
		}
		for i, ev := range evs {
			ctl.BeforeSend(writeTimeout, i < len(evs)-1)
			if err := stream.Send(ev.Message(0)); err != nil {
				return err
			}
		}
	}
}
