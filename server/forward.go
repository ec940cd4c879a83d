package server

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
	"github.com/fencedio/fenced/server/internal/api"
	"github.com/fencedio/fenced/server/internal/apierr"
	"github.com/fencedio/fenced/server/internal/peers"
	"github.com/hashicorp/raft"
)

// Any node serves every call. The leader serves Acquire, Renew, Release,
// Get and List itself; any other node forwards them to the leader over the
// peer port (internal/peers/mux.go) with the caller's deadline, and hands back the
// leader's answer as it came: code, message and details. Watch is served by
// every node from the transitions it applied itself, which are the same on
// every node, in the same order and with the same revisions.
//
// A call reaching a node that is not the leader and has no leader to
// forward to waits up to 2 heartbeat timeouts for one, then answers
// unavailable. A call that was forwarded once is never forwarded again, so
// calls cannot loop while nodes disagree about who leads.

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
		f.endEpoch(apierr.ErrLeaderChanged)
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
	stop := context.AfterFunc(epoch, func() { cancel(apierr.ErrLeaderChanged) })
	return ctx, func() { stop(); cancel(nil) }
}

// call runs one forwarded call under bound, answering unavailable when a
// leader change cut it: it may or may not have taken effect at the old
// leader, and the caller may retry. Any other failure to hear from the
// leader is answered as unreached says.
func forwardCall[T any](f *forwarder, ctx context.Context, call func(context.Context) (*connect.Response[T], error)) (*connect.Response[T], error) {
	fctx, done := f.bound(ctx)
	defer done()
	resp, err := call(fctx)
	if err != nil && ctx.Err() == nil && errors.Is(context.Cause(fctx), apierr.ErrLeaderChanged) {
		return nil, apierr.Connect(apierr.ErrLeaderChanged)
	}
	return resp, unreached(ctx, err)
}

// errLeaderUnreached is the answer to a forwarded call that got no answer
// from the leader: it may or may not have reached it and taken effect.
var errLeaderUnreached = errors.New("the leader could not be reached")

// unreached returns err, the error of a call forwarded to the leader for a
// caller whose context is ctx, as the caller gets it. An answer of the
// leader is handed back as it came. Anything else failed to reach the
// leader or to bring its answer back (connect-go reports a connection
// reset or a broken pipe as canceled): unavailable, so that the caller
// retries, or deadline_exceeded once the caller's deadline passed.
func unreached(ctx context.Context, err error) error {
	if err == nil || connect.IsWireError(err) {
		return err
	}
	if ctx.Err() != nil {
		return apierr.Connect(fmt.Errorf("%w: %w", context.Cause(ctx), err))
	}
	return connect.NewError(connect.CodeUnavailable, fmt.Errorf("%w: %w", errLeaderUnreached, err))
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
		case <-f.s.ctx.Done():
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
				return s.peers.DialKind(ctx, addr, peers.KindAPI)
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

// leaderFor returns the raft address of the leader a call with header h
// goes to, or "" when this node serves it: when here is true, or when
// this node leads. A call forwarded once is never forwarded again.
func (f *forwarder) leaderFor(ctx context.Context, h http.Header, here bool) (string, error) {
	if here {
		return "", nil
	}
	if h.Get(api.ForwardedHeader) != "" {
		return "", apierr.Connect(apierr.ErrNotReady)
	}
	addr, err := f.leaderAddr(ctx)
	return addr, apierr.Connect(err)
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
		case <-s.ctx.Done():
			return "", apierr.ErrNotReady
		case <-give.C:
			return "", apierr.ErrNotReady
		case <-tick.C:
		}
	}
}

// whileLeading derives a context that ends with cause apierr.ErrDeposed when this
// node stops leading. It is for calls that wait on the leader (queued
// acquisitions), so that they go on at the new leader instead of waiting
// out their time here.
func (s *Server) whileLeading(ctx context.Context) (context.Context, func()) {
	s.leaderMu.Lock()
	lead := s.leading
	s.leaderMu.Unlock()
	ctx, cancel := context.WithCancelCause(ctx)
	if lead == nil {
		cancel(apierr.ErrDeposed)
		return ctx, func() {}
	}
	stop := context.AfterFunc(lead, func() { cancel(apierr.ErrDeposed) })
	return ctx, func() { stop(); cancel(nil) }
}

// setLeading starts (leader=true) or ends the context whileLeading derives
// from. The caller holds leaderMu.
func (s *Server) setLeading(leader bool) {
	if s.endLeading != nil {
		s.endLeading()
		s.leading, s.endLeading = nil, nil
	}
	s.serving = nil
	if leader {
		s.leading, s.endLeading = context.WithCancel(context.Background())
		s.serving = make(chan struct{})
	}
}

// awaitServing waits, for at most a heartbeat timeout, until this node,
// which raft has made leader, serves: its Barrier applied and its
// deadlines reset (becomeLeader). A call that reaches a new leader in that
// window, such as a waiting acquisition the old leader passed on when it
// stepped down, is then served instead of refused as not ready. It returns
// at once when this node does not lead or already serves, and when
// leadership or ctx ends.
func (s *Server) awaitServing(ctx context.Context) {
	s.leaderMu.Lock()
	serving, leading := s.serving, s.leading
	s.leaderMu.Unlock()
	if serving == nil || leading == nil {
		return
	}
	give := time.NewTimer(s.cfg.HeartbeatTimeout)
	defer give.Stop()
	select {
	case <-serving:
	case <-leading.Done():
	case <-ctx.Done():
	case <-give.C:
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
		ErrorLog:          s.httpErrorLog(),
	}
	s.mu.Lock()
	s.peerAPI = srv
	s.mu.Unlock()
	s.wg.Add(2)
	go func() { defer s.wg.Done(); srv.Serve(s.peers.APIListener()) }()
	go func() { defer s.wg.Done(); s.forward.watchLeader() }()
}

func (s *Server) closePeerAPI() {
	s.mu.Lock()
	srv := s.peerAPI
	s.mu.Unlock()
	if srv != nil {
		srv.Close()
	}
	s.forward.close()
}
