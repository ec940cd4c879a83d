package server

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/fencedio/fenced/internal/failpoint"
	fencedv1 "github.com/fencedio/fenced/internal/gen/fenced/v1"
	"github.com/fencedio/fenced/internal/gen/fenced/v1/fencedv1connect"
	"github.com/fencedio/fenced/lease"
	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"
)

// Any node serves every call. The leader serves Acquire, Renew, Release,
// Get and List itself; any other node forwards them to the leader over the
// peer port (peermux.go) with the caller's deadline, and hands back the
// leader's answer as it came: code, message and details. Watch is served by
// every node from the transitions it applied itself, which are the same on
// every node, in the same order and with the same revisions.
//
// A call reaching a node that is not the leader and has no leader to
// forward to waits up to 2 heartbeat timeouts for one, then answers
// unavailable. A call that was forwarded once is never forwarded again, so
// calls cannot loop while nodes disagree about who leads.

// forwardedHeader marks a call forwarded by another node.
const forwardedHeader = "Fenced-Forwarded-By"

// errDeposed is the cause of a call's context when this node stopped
// leading while it served the call.
var errDeposed = errors.New("this node stopped leading")

// errLeaderChanged ends a forwarded call when this node learns of another
// leader (or loses the one it knew) while the call is at the old one.
var errLeaderChanged = errors.New("the leader changed while the call was forwarded to it")

// forwarder holds the clients of the leader's API, by raft address.
type forwarder struct {
	s         *Server
	transport *http.Transport
	mu        sync.Mutex
	clients   map[string]fencedv1connect.LeaseServiceClient

	// epoch ends when this node sees a leader change: a call forwarded to
	// a leader that was paused or cut off would otherwise wait for its
	// answer as long as the caller's deadline allows.
	epoch    context.Context
	endEpoch context.CancelCauseFunc
}

// leaderChanged ends the calls forwarded so far.
func (f *forwarder) leaderChanged() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.endEpoch != nil {
		f.endEpoch(errLeaderChanged)
	}
	f.epoch, f.endEpoch = context.WithCancelCause(context.Background())
}

// bound derives the context of a forwarded call: ctx, ended also by a
// leader change.
func (f *forwarder) bound(ctx context.Context) (context.Context, func()) {
	f.mu.Lock()
	epoch := f.epoch
	f.mu.Unlock()
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(epoch, func() { cancel(errLeaderChanged) })
	return ctx, func() { stop(); cancel(nil) }
}

// call runs one forwarded call under bound, answering unavailable when a
// leader change cut it: it may or may not have taken effect at the old
// leader, and the caller may retry.
func forwardCall[T any](f *forwarder, ctx context.Context, call func(context.Context) (*connect.Response[T], error)) (*connect.Response[T], error) {
	fctx, done := f.bound(ctx)
	defer done()
	resp, err := call(fctx)
	if err != nil && ctx.Err() == nil && errors.Is(context.Cause(fctx), errLeaderChanged) {
		return nil, connectError(errLeaderChanged)
	}
	return resp, err
}

// watchLeader ends forwarded calls on every leader change this node
// observes, until the server closes.
func (f *forwarder) watchLeader() {
	ch := make(chan raft.Observation, 64)
	obs := raft.NewObserver(ch, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	})
	f.s.raft.RegisterObserver(obs)
	defer f.s.raft.DeregisterObserver(obs)
	for {
		select {
		case <-ch:
			f.leaderChanged()
		case <-f.s.done:
			return
		}
	}
}

func newForwarder(s *Server) *forwarder {
	protocols := new(http.Protocols)
	protocols.SetUnencryptedHTTP2(true)
	f := &forwarder{
		s: s,
		transport: &http.Transport{
			Protocols: protocols,
			DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
				return s.peers.dial(ctx, addr, peerAPI)
			},
			IdleConnTimeout: 90 * time.Second,
		},
		clients: make(map[string]fencedv1connect.LeaseServiceClient),
	}
	f.epoch, f.endEpoch = context.WithCancelCause(context.Background())
	return f
}

func (f *forwarder) client(addr string) fencedv1connect.LeaseServiceClient {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.clients[addr]
	if !ok {
		c = fencedv1connect.NewLeaseServiceClient(&http.Client{Transport: f.transport}, "http://"+addr)
		f.clients[addr] = c
	}
	return c
}

func (f *forwarder) close() { f.transport.CloseIdleConnections() }

// leader returns a client of the leader's API, or nil if this node leads.
// With no leader known it waits for one, up to 2 heartbeat timeouts.
func (f *forwarder) leader(ctx context.Context) (fencedv1connect.LeaseServiceClient, error) {
	addr, err := f.leaderAddr(ctx)
	if err != nil || addr == "" {
		return nil, err
	}
	return f.client(addr), nil
}

func (f *forwarder) adminClient(addr string) fencedv1connect.AdminServiceClient {
	return fencedv1connect.NewAdminServiceClient(&http.Client{Transport: f.transport}, "http://"+addr)
}

func (f *forwarder) clusterClient(addr string) fencedv1connect.ClusterServiceClient {
	return fencedv1connect.NewClusterServiceClient(&http.Client{Transport: f.transport}, "http://"+addr)
}

// leaderAddr returns the leader's raft address, or "" if this node leads.
// With no leader known it waits for one, up to 2 heartbeat timeouts.
func (f *forwarder) leaderAddr(ctx context.Context) (string, error) {
	s := f.s
	give := time.NewTimer(2 * s.cfg.HeartbeatTimeout)
	defer give.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		addr, _ := s.raft.LeaderWithID()
		switch {
		case addr == s.trans.LocalAddr():
			return "", nil
		case addr != "":
			return string(addr), nil
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-s.done:
			return "", errNotReady
		case <-give.C:
			return "", errNotReady
		case <-tick.C:
		}
	}
}

// routedService serves the lease API on any node: locally on the leader,
// by forwarding elsewhere.
type routedService struct {
	local *service
	s     *Server
}

var _ fencedv1connect.LeaseServiceHandler = (*routedService)(nil)

func (s *Server) leaseService() fencedv1connect.LeaseServiceHandler {
	return &routedService{local: &service{s: s}, s: s}
}

// route decides where a call goes: rpc is nil when this node serves it.
func (r *routedService) route(ctx context.Context, h http.Header) (fencedv1connect.LeaseServiceClient, error) {
	if r.s.ready.Load() {
		return nil, nil
	}
	if h.Get(forwardedHeader) != "" {
		// Forwarded here by a node that took this one for the leader.
		if r.s.raft.State() == raft.Leader {
			return nil, nil // not ready yet: served locally, which waits or answers unavailable
		}
		return nil, connectError(errNotReady)
	}
	if r.s.raft.State() == raft.Leader {
		return nil, nil
	}
	rpc, err := r.s.forward.leader(ctx)
	if err != nil {
		return nil, connectError(err)
	}
	return rpc, nil
}

// again reports whether a call the local node failed may be sent to the
// leader instead: it certainly did not take effect here, because this node
// was not (or no longer) the leader when it tried.
func (r *routedService) again(err error, h http.Header) bool {
	if err == nil || h.Get(forwardedHeader) != "" || r.s.raft.State() == raft.Leader {
		return false
	}
	return errors.Is(err, errNotReady) || errors.Is(err, raft.ErrNotLeader) || errors.Is(err, errDeposed)
}

// forwarded is the request this node sends the leader for a call whose
// context is ctx: it names this node and, with auth on, the principal the
// caller authenticated as here (the leader authorizes it).
func forwarded[T any](ctx context.Context, s *Server, msg *T) *connect.Request[T] {
	req := connect.NewRequest(msg)
	req.Header().Set(forwardedHeader, s.cfg.NodeID)
	s.forwardPrincipal(ctx, req.Header())
	return req
}

// whileLeading derives a context that ends with cause errDeposed when this
// node stops leading. It is for calls that wait on the leader (queued
// acquisitions), so that they go on at the new leader instead of waiting
// out their time here.
func (s *Server) whileLeading(ctx context.Context) (context.Context, func()) {
	s.leaderMu.Lock()
	lead := s.leading
	s.leaderMu.Unlock()
	ctx, cancel := context.WithCancelCause(ctx)
	if lead == nil {
		cancel(errDeposed)
		return ctx, func() {}
	}
	stop := context.AfterFunc(lead, func() { cancel(errDeposed) })
	return ctx, func() { stop(); cancel(nil) }
}

// setLeading starts (leader=true) or ends the context whileLeading derives
// from. The caller holds leaderMu.
func (s *Server) setLeading(leader bool) {
	if s.endLeading != nil {
		s.endLeading()
		s.leading, s.endLeading = nil, nil
	}
	if leader {
		s.leading, s.endLeading = context.WithCancel(context.Background())
	}
}

func (r *routedService) Acquire(ctx context.Context, req *connect.Request[fencedv1.AcquireRequest]) (*connect.Response[fencedv1.AcquireResponse], error) {
	start := time.Now()
	owner := req.Msg.GetOwner()
	for attempt := range 3 {
		rpc, err := r.route(ctx, req.Header())
		if err != nil {
			return nil, afterCut(err, attempt, owner)
		}
		if rpc != nil {
			resp, err := forwardCall(r.s.forward, ctx, func(ctx context.Context) (*connect.Response[fencedv1.AcquireResponse], error) {
				return rpc.Acquire(ctx, forwarded(ctx, r.s, req.Msg))
			})
			return resp, afterCut(err, attempt, owner)
		}
		lctx, done := r.s.whileLeading(ctx)
		resp, err := r.local.Acquire(lctx, req)
		deposed := errors.Is(context.Cause(lctx), errDeposed)
		done()
		if err == nil || !(deposed || r.again(err, req.Header())) || req.Header().Get(forwardedHeader) != "" {
			return resp, afterCut(err, attempt, owner)
		}
		// This node stopped leading while the caller waited: go on waiting
		// at the new leader for what is left of the wait.
		msg := proto.CloneOf(req.Msg)
		if msg.WaitMs > 0 {
			msg.WaitMs = max(msg.WaitMs-time.Since(start).Milliseconds(), 0)
		}
		req = connect.NewRequest(msg)
	}
	return nil, connect.NewError(connect.CodeUnavailable, errMaybeGranted)
}

// errMaybeGranted answers an acquisition that this node tried, stopped
// leading, and retried at the new leader without a grant to show: the first
// try may have been granted (its answer lost with the leadership), so the
// outcome is unknown. See docs/protocol.md, section 3.8.
var errMaybeGranted = errors.New("the leader changed while the acquisition was served: it may have been granted")

// afterCut is the answer to a retried acquisition (attempt > 0) of owner:
// "held" by the same owner and "unavailable" become unavailable with
// errMaybeGranted, since the holder may be the earlier try's grant. Other
// answers, and first tries, stand.
func afterCut(err error, attempt int, owner string) error {
	if err == nil || attempt == 0 {
		return err
	}
	switch connect.CodeOf(err) {
	case connect.CodeUnavailable:
		return connect.NewError(connect.CodeUnavailable, errMaybeGranted)
	case connect.CodeFailedPrecondition:
		var ce *connect.Error
		if !errors.As(err, &ce) {
			return err
		}
		for _, d := range ce.Details() {
			if m, derr := d.Value(); derr == nil {
				if h, ok := m.(*fencedv1.LeaseHeld); ok && h.GetOwner() == owner {
					return connect.NewError(connect.CodeUnavailable, errMaybeGranted)
				}
			}
		}
	}
	return err
}

func (r *routedService) Renew(ctx context.Context, req *connect.Request[fencedv1.RenewRequest]) (*connect.Response[fencedv1.RenewResponse], error) {
	if failpoint.Enabled(failpoint.DeposedLeaderRenews) && r.s.everLed.Load() {
		return r.local.Renew(ctx, req)
	}
	for range 3 {
		rpc, err := r.route(ctx, req.Header())
		if err != nil {
			return nil, err
		}
		if rpc != nil {
			return forwardCall(r.s.forward, ctx, func(ctx context.Context) (*connect.Response[fencedv1.RenewResponse], error) {
				return rpc.Renew(ctx, forwarded(ctx, r.s, req.Msg))
			})
		}
		resp, err := r.local.Renew(ctx, req)
		if !r.again(err, req.Header()) {
			return resp, err
		}
	}
	return nil, connectError(errNotReady)
}

func (r *routedService) Release(ctx context.Context, req *connect.Request[fencedv1.ReleaseRequest]) (*connect.Response[fencedv1.ReleaseResponse], error) {
	for range 3 {
		rpc, err := r.route(ctx, req.Header())
		if err != nil {
			return nil, err
		}
		if rpc != nil {
			return forwardCall(r.s.forward, ctx, func(ctx context.Context) (*connect.Response[fencedv1.ReleaseResponse], error) {
				return rpc.Release(ctx, forwarded(ctx, r.s, req.Msg))
			})
		}
		resp, err := r.local.Release(ctx, req)
		if !r.again(err, req.Header()) {
			return resp, err
		}
	}
	return nil, connectError(errNotReady)
}

func (r *routedService) Get(ctx context.Context, req *connect.Request[fencedv1.GetRequest]) (*connect.Response[fencedv1.GetResponse], error) {
	if staleRead(req.Header()) {
		if err := validateKey(req.Msg.GetKey()); err != nil {
			return nil, connectError(err)
		}
		if _, err := r.s.authorize(ctx, PermRead, req.Msg.GetKey()); err != nil {
			return nil, connectError(err)
		}
		return r.local.get(req.Msg)
	}
	for range 3 {
		rpc, err := r.route(ctx, req.Header())
		if err != nil {
			return nil, err
		}
		if rpc != nil {
			return forwardCall(r.s.forward, ctx, func(ctx context.Context) (*connect.Response[fencedv1.GetResponse], error) {
				return rpc.Get(ctx, forwarded(ctx, r.s, req.Msg))
			})
		}
		if err := r.s.confirmRead(); err != nil {
			if r.again(err, req.Header()) {
				continue
			}
			return nil, connectError(err)
		}
		resp, err := r.local.Get(ctx, req)
		if !r.again(err, req.Header()) {
			return resp, err
		}
	}
	return nil, connectError(errNotReady)
}

func (r *routedService) List(ctx context.Context, req *connect.Request[fencedv1.ListRequest]) (*connect.Response[fencedv1.ListResponse], error) {
	if staleRead(req.Header()) {
		if _, err := r.s.authorize(ctx, PermRead, req.Msg.GetPrefix()); err != nil {
			return nil, connectError(err)
		}
		return r.local.list(req.Msg)
	}
	for range 3 {
		rpc, err := r.route(ctx, req.Header())
		if err != nil {
			return nil, err
		}
		if rpc != nil {
			return forwardCall(r.s.forward, ctx, func(ctx context.Context) (*connect.Response[fencedv1.ListResponse], error) {
				return rpc.List(ctx, forwarded(ctx, r.s, req.Msg))
			})
		}
		if err := r.s.confirmRead(); err != nil {
			if r.again(err, req.Header()) {
				continue
			}
			return nil, connectError(err)
		}
		resp, err := r.local.List(ctx, req)
		if !r.again(err, req.Header()) {
			return resp, err
		}
	}
	return nil, connectError(errNotReady)
}

// Reads. Get and List are linearizable by default: the leader answers
// them after a leadership check that began after the read arrived
// (leaderCheck), so a read reflects every grant, release and expiry
// acknowledged before it was sent; other nodes forward them. A request with
// the header "Fenced-Stale-Read: true" is answered by whichever node gets
// it, from its own applied state, without forwarding or any check: it may
// miss recent transitions (a follower lags the leader; a deposed leader
// may not know it is deposed), and the remaining TTLs it shows are that
// node's guesses.

// staleReadHeader opts a Get or List in to possibly stale reads.
const staleReadHeader = "Fenced-Stale-Read"

func staleRead(h http.Header) bool { return h.Get(staleReadHeader) == "true" }

// confirmRead confirms that this node still leads, after the read
// arrived.
func (s *Server) confirmRead() error {
	if !s.ready.Load() {
		return errNotReady
	}
	return s.leader.confirm()
}

// Watch is served by every node from its own applied transitions.
func (r *routedService) Watch(ctx context.Context, req *connect.Request[fencedv1.WatchRequest], stream *connect.ServerStream[fencedv1.WatchResponse]) error {
	return r.local.Watch(ctx, req, stream)
}

// KeepAlive renews each lease where it can be renewed: here while this
// node leads, at the leader otherwise, deciding again for every request.
func (r *routedService) KeepAlive(ctx context.Context, stream *connect.BidiStream[fencedv1.KeepAliveRequest, fencedv1.KeepAliveResponse]) error {
	for {
		req, err := stream.Receive()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		out := &fencedv1.KeepAliveResponse{}
		if r.s.ready.Load() {
			// The leader's hot path: no request or response to build.
			err := r.s.authorizeRenew(ctx, req.GetKey(), req.GetLeaseId())
			var l lease.Lease
			if err == nil {
				l, err = r.s.Renew(ctx, req.GetKey(), req.GetLeaseId())
			}
			r.s.metrics.countRenewal(err)
			if err == nil || !r.again(err, http.Header{}) {
				var ce *connect.Error
				if errors.As(connectError(err), &ce) {
					out.ErrorCode, out.ErrorMessage = ce.Code().String(), ce.Message()
				} else {
					out.Lease = wireLease(l, l.TTL, holderView) // just renewed: its full TTL is left
					out.TokenSignature = r.s.signature(l.Key, l.Token)
				}
				if err := stream.Send(out); err != nil {
					return err
				}
				continue
			}
		}
		resp, err := r.Renew(ctx, connect.NewRequest(&fencedv1.RenewRequest{Key: req.GetKey(), LeaseId: req.GetLeaseId()}))
		if err != nil {
			var ce *connect.Error
			if !errors.As(err, &ce) {
				ce = connect.NewError(connect.CodeUnavailable, err)
			}
			out.ErrorCode, out.ErrorMessage = ce.Code().String(), ce.Message()
		} else {
			out.Lease = resp.Msg.GetLease()
			out.TokenSignature = resp.Msg.TokenSignature
		}
		if err := stream.Send(out); err != nil {
			return err
		}
	}
}

// servePeerAPI serves the calls other nodes forward to this one, on the
// peer port.
func (s *Server) servePeerAPI() {
	protocols := new(http.Protocols)
	protocols.SetUnencryptedHTTP2(true)
	srv := &http.Server{
		Handler:           s.handler(true),
		Protocols:         protocols,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return s.baseContext() },
	}
	s.closeMu.Lock()
	s.peerAPI = srv
	s.closeMu.Unlock()
	go srv.Serve(s.peers.apiListener())
	s.wg.Add(1)
	go func() { defer s.wg.Done(); s.forward.watchLeader() }()
}

func (s *Server) closePeerAPI() {
	s.closeMu.Lock()
	srv := s.peerAPI
	s.closeMu.Unlock()
	if srv != nil {
		srv.Close()
	}
	s.forward.close()
}

// routedAdmin serves the AdminService on any node like routedService the
// lease API: Revoke is a write, served by the leader and forwarded to it
// from other nodes with the principal authenticated here.
type routedAdmin struct {
	local *adminService
	s     *Server
}

var _ fencedv1connect.AdminServiceHandler = (*routedAdmin)(nil)

func (s *Server) adminService() fencedv1connect.AdminServiceHandler {
	return &routedAdmin{local: &adminService{s: s}, s: s}
}

// leader returns a client of the leader's AdminService, or nil when this
// node serves the call itself.
func (r *routedAdmin) leader(ctx context.Context, h http.Header) (fencedv1connect.AdminServiceClient, error) {
	if r.s.ready.Load() || r.s.raft.State() == raft.Leader {
		return nil, nil
	}
	if h.Get(forwardedHeader) != "" {
		return nil, connectError(errNotReady)
	}
	addr, err := r.s.forward.leaderAddr(ctx)
	if err != nil {
		return nil, connectError(err)
	}
	if addr == "" {
		return nil, nil
	}
	return r.s.forward.adminClient(addr), nil
}

func (r *routedAdmin) Revoke(ctx context.Context, req *connect.Request[fencedv1.RevokeRequest]) (*connect.Response[fencedv1.RevokeResponse], error) {
	routes := &routedService{s: r.s}
	for range 3 {
		rpc, err := r.leader(ctx, req.Header())
		if err != nil {
			return nil, err
		}
		if rpc != nil {
			return forwardCall(r.s.forward, ctx, func(ctx context.Context) (*connect.Response[fencedv1.RevokeResponse], error) {
				return rpc.Revoke(ctx, forwarded(ctx, r.s, req.Msg))
			})
		}
		resp, err := r.local.Revoke(ctx, req)
		if !routes.again(err, req.Header()) {
			return resp, err
		}
	}
	return nil, connectError(errNotReady)
}
