package forward

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/fencedio/fenced/api/fenced/v1/fencedv1connect"
	"github.com/fencedio/fenced/internal/noreplay"
	"github.com/fencedio/fenced/server/internal/apierr"
	"github.com/hashicorp/raft"
)

// Leadership is who leads the cluster as this node sees it: raft's view,
// which the node passes in.
type Leadership interface {
	// Leader returns the raft address of the leader, "" while none is
	// known, and whether that leader is this node.
	Leader() (addr string, self bool)
	// Observe sends an observation on ch at each leader change this node
	// observes, without blocking (a change is dropped while ch is full),
	// until stop is called.
	Observe(ch chan raft.Observation) (stop func())
}

// Config is what a Forwarder needs of its node.
type Config struct {
	// Base is the node's context: when it ends, WatchLeader returns and
	// calls waiting for a leader are refused as not ready.
	Base context.Context
	// Leadership tells who leads, and when that changes.
	Leadership Leadership
	// Dial connects to the API listener of the peer port at a raft
	// address.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// HeartbeatTimeout is raft's; a call with no leader known waits for one
	// up to 2 of them.
	HeartbeatTimeout time.Duration
}

// Forwarder holds the clients of the leader's API, by raft address.
type Forwarder struct {
	cfg       Config
	transport *http.Transport
	client    *http.Client // over transport, with noreplay
	mu        sync.Mutex
	clients   map[string]fencedv1connect.LeaseServiceClient

	// epoch ends when this node sees a leader change: a call forwarded to
	// a leader that was paused or cut off would otherwise wait for its
	// answer as long as the caller's deadline allows.
	epoch    context.Context
	endEpoch context.CancelCauseFunc
}

// New returns a Forwarder that reaches the leader as cfg says. Nothing is
// dialed before a call needs it; WatchLeader is the node's to run.
func New(cfg Config) *Forwarder {
	protocols := new(http.Protocols)
	protocols.SetUnencryptedHTTP2(true)
	f := &Forwarder{
		cfg: cfg,
		transport: &http.Transport{
			Protocols: protocols,
			DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
				return cfg.Dial(ctx, addr)
			},
			IdleConnTimeout: 90 * time.Second,
		},
		clients: make(map[string]fencedv1connect.LeaseServiceClient),
	}
	f.client = &http.Client{Transport: noreplay.Transport{Next: f.transport}}
	f.epoch, f.endEpoch = context.WithCancelCause(context.Background())
	return f
}

// leaderChanged ends the calls forwarded so far.
func (f *Forwarder) leaderChanged() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.endEpoch != nil {
		f.endEpoch(apierr.ErrLeaderChanged)
	}
	f.epoch, f.endEpoch = context.WithCancelCause(context.Background())
}

// Epoch returns the context that ends, with cause apierr.ErrLeaderChanged,
// at the next leader change.
func (f *Forwarder) Epoch() context.Context {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.epoch
}

// bound derives the context of a forwarded call: ctx, ended also by a
// leader change.
func (f *Forwarder) bound(ctx context.Context) (context.Context, func()) {
	f.mu.Lock()
	epoch := f.epoch
	f.mu.Unlock()
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(epoch, func() { cancel(apierr.ErrLeaderChanged) })
	return ctx, func() { stop(); cancel(nil) }
}

// Call runs one forwarded call under bound, answering unavailable when a
// leader change cut it: it may or may not have taken effect at the old
// leader, and the caller may retry. Any other failure to hear from the
// leader is answered as Unreached says.
func Call[T any](f *Forwarder, ctx context.Context, call func(context.Context) (*connect.Response[T], error)) (*connect.Response[T], error) {
	fctx, done := f.bound(ctx)
	defer done()
	resp, err := call(fctx)
	if err != nil && ctx.Err() == nil && errors.Is(context.Cause(fctx), apierr.ErrLeaderChanged) {
		return nil, apierr.Connect(apierr.ErrLeaderChanged)
	}
	return resp, Unreached(ctx, err)
}

// errLeaderUnreached is the answer to a forwarded call that got no answer
// from the leader: it may or may not have reached it and taken effect.
var errLeaderUnreached = errors.New("the leader could not be reached")

// Unreached returns err, the error of a call forwarded to the leader for a
// caller whose context is ctx, as the caller gets it. An answer of the
// leader is handed back as it came. Anything else failed to reach the
// leader or to bring its answer back (connect-go reports a connection
// reset or a broken pipe as canceled): unavailable, so that the caller
// retries, or deadline_exceeded once the caller's deadline passed.
func Unreached(ctx context.Context, err error) error {
	if err == nil || connect.IsWireError(err) {
		return err
	}
	if ctx.Err() != nil {
		return apierr.Connect(fmt.Errorf("%w: %w", context.Cause(ctx), err))
	}
	return connect.NewError(connect.CodeUnavailable, fmt.Errorf("%w: %w", errLeaderUnreached, err))
}

// LeaseClient returns the client of the LeaseService at raft address addr,
// one per address.
func (f *Forwarder) LeaseClient(addr string) fencedv1connect.LeaseServiceClient {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.clients[addr]
	if !ok {
		c = fencedv1connect.NewLeaseServiceClient(f.client, "http://"+addr)
		f.clients[addr] = c
	}
	return c
}

// AdminClient returns a client of the AdminService at raft address addr.
func (f *Forwarder) AdminClient(addr string) fencedv1connect.AdminServiceClient {
	return fencedv1connect.NewAdminServiceClient(f.client, "http://"+addr)
}

// ClusterClient returns a client of the ClusterService at raft address
// addr.
func (f *Forwarder) ClusterClient(addr string) fencedv1connect.ClusterServiceClient {
	return fencedv1connect.NewClusterServiceClient(f.client, "http://"+addr)
}

// RejectionClient returns a client of the RejectionService at raft address
// addr.
func (f *Forwarder) RejectionClient(addr string) fencedv1connect.RejectionServiceClient {
	return fencedv1connect.NewRejectionServiceClient(f.client, "http://"+addr)
}

// Transport is the forwarder's transport: HTTP to the peer ports' API
// listeners, by raft address, over the connections the clients share.
func (f *Forwarder) Transport() http.RoundTripper { return f.client.Transport }

// Close closes the idle connections to the leaders called so far.
func (f *Forwarder) Close() { f.transport.CloseIdleConnections() }
