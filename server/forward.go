package server

import (
	"context"
	"net"
	"net/http"
	"time"

	"github.com/fencedio/fenced/server/internal/apierr"
	"github.com/fencedio/fenced/server/internal/forward"
	"github.com/fencedio/fenced/server/internal/peers"
	"github.com/hashicorp/raft"
)

// Any node serves every call: the leader serves the lease API itself, any
// other node forwards it to the leader over the peer port
// (internal/forward). This file holds the node's own leadership state,
// which the calls it serves as leader wait on, the adapter that tells the
// forwarder who leads as raft sees it, and the peer port's API server.

// newForwarder returns the node's forwarder. It reads raft and the peer
// port only when a call needs them, after startRaft.
func newForwarder(s *Server) *forward.Forwarder {
	return forward.New(forward.Config{
		Base:       s.ctx,
		Leadership: raftLeadership{s},
		Dial: func(ctx context.Context, addr string) (net.Conn, error) {
			return s.peers.DialKind(ctx, addr, peers.KindAPI)
		},
		HeartbeatTimeout: s.cfg.HeartbeatTimeout,
	})
}

// raftLeadership is who leads as raft tells this node, for the forwarder.
type raftLeadership struct{ s *Server }

func (l raftLeadership) Leader() (string, bool) {
	addr, _ := l.s.raft.LeaderWithID()
	return string(addr), addr == l.s.trans.LocalAddr()
}

func (l raftLeadership) Observe(ch chan raft.Observation) func() {
	obs := raft.NewObserver(ch, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	})
	l.s.raft.RegisterObserver(obs)
	return func() { l.s.raft.DeregisterObserver(obs) }
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
	go func() { defer s.wg.Done(); s.forward.WatchLeader() }()
}

func (s *Server) closePeerAPI() {
	s.mu.Lock()
	srv := s.peerAPI
	s.mu.Unlock()
	if srv != nil {
		srv.Close()
	}
	s.forward.Close()
}
