package server

import (
	"context"
	"net/http"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/api/fenced/v1/fencedv1connect"
	"github.com/fencedio/fenced/lease"
	"github.com/fencedio/fenced/server/internal/api"
	"github.com/fencedio/fenced/server/internal/apierr"
	"github.com/fencedio/fenced/server/internal/rejections"
	"github.com/fencedio/fenced/server/internal/security"
	"github.com/hashicorp/raft"
)

// Stale rejections reported by resources (RejectionService) are kept by
// the node that records them, the leader, in a rejections.Book, and
// relayed to the watchers of every other node by a rejections.Relay;
// RejectionService is a rejections.Service. This file ties them to the
// node: the grants that resolve a report's tokens, the hub that carries
// REJECTED events, authorization, the forwarder that finds and calls the
// leader, the HTTP stack the service is mounted on, and the goroutines the
// node's shutdown waits for.

// relayPrincipal is the caller of a relay once auth is on: another node,
// trusted as the peer port is. It holds no permission; serveRelay needs
// none, as the relaying node authorizes each of its watchers.
var relayPrincipal = security.Principal{Name: "fenced-peer", Method: "peer"}

// initRejections sets up the grant memory (fed by applied), the rejection
// book and the relay. Called by New before raft replays the log.
func (s *Server) initRejections() error {
	s.grants = rejections.NewGrantMemory()
	s.relay = &rejections.Relay{
		Base: s.ctx, Spawn: s.spawn, Leader: relayLeader{s},
		Publish: s.publishRelayed, Retry: s.cfg.HeartbeatTimeout, Log: s.log,
	}
	var err error
	s.rejections, err = rejections.NewBook(s.cfg.Registerer, s.log)
	return err
}

// registerRejections serves RejectionService and the dashboard's
// GET /v1/rejections on mux.
func (s *Server) registerRejections(mux *http.ServeMux, peer bool) {
	svc := s.rejectionService()
	path, h := fencedv1connect.NewRejectionServiceHandler(svc, s.handlerOptions()...)
	mux.Handle(path, s.limitRPC(s.authenticate(limitBody(h, s.cfg.MaxBodyBytes), peer)))
	mux.Handle("GET /v1/rejections", s.authenticate(rejections.ListHandler(svc.List), peer))
}

// rejectionService is RejectionService on this node.
func (s *Server) rejectionService() *rejections.Service {
	return &rejections.Service{
		Book: s.rejections, Rules: wireRules{}, Wire: apierr.Connect,
		MayReport: func(ctx context.Context, scope string) error {
			_, err := s.authz.Authorize(ctx, PermReport, scope)
			return err
		},
		MayRead: func(ctx context.Context, prefix string) error {
			_, err := s.authz.Authorize(ctx, PermRead, prefix)
			return err
		},
		Record:  s.recordRejections,
		Leader:  s.rejectionLeader,
		Forward: apiNode{s}.Forward,
		Name:    s.nameForwarded,
	}
}

// rejectionLeader returns a client of the leader's RejectionService, or
// nil when this node serves the call itself.
func (s *Server) rejectionLeader(ctx context.Context, h http.Header) fencedv1connect.RejectionServiceClient {
	if h.Get(api.ForwardedHeader) != "" || s.raft.State() == raft.Leader {
		return nil
	}
	addr, err := s.forward.LeaderAddr(ctx)
	if err != nil || addr == "" {
		return nil
	}
	return s.forward.RejectionClient(addr)
}

// recordRejections records a validated report and publishes a REJECTED
// event of each entry. It returns the number of rejections recorded.
func (s *Server) recordRejections(ctx context.Context, rs []*fencedv1.StaleRejection) uint64 {
	return s.rejections.Record(ctx, rs, s.resolveGrant, func(e *fencedv1.Rejection) { s.hub.PublishRejection(rejectedEvent(e, 0)) })
}

// resolveGrant finds the grant of token for key: in the grant memory, or
// the current lease when it is that token's.
func (s *Server) resolveGrant(key string, token uint64) (rejections.Grant, bool) {
	if g, ok := s.grants.Lookup(key, token); ok {
		return g, true
	}
	if l, ok := s.currentOf(key); ok && l.Token == token {
		return rejections.Grant{Owner: l.Owner}, true
	}
	return rejections.Grant{}, false
}

// wireRules are the wire contract's rules for the fields of a report.
type wireRules struct{}

func (wireRules) Key(key string) error                     { return api.ValidateKey(key) }
func (wireRules) Owner(owner string) error                 { return api.ValidateOwner(owner) }
func (wireRules) Text(field, s string) error               { return apierr.ValidateText(field, s) }
func (wireRules) Invalid(format string, args ...any) error { return apierr.Invalidf(format, args...) }

// rejectedEvent is the Watch event of a recorded rejection: the refused
// epoch as its lease, and the rejection.
func rejectedEvent(e *fencedv1.Rejection, revision uint64) *fencedv1.Event {
	return &fencedv1.Event{Type: fencedv1.Event_REJECTED, Revision: revision, Rejection: e,
		Lease: api.WireLease(lease.Lease{Key: e.Scope, Owner: e.PresentedOwner, Token: e.PresentedToken}, 0, api.PublicView)}
}

// relayLeader is the leader as the relay sees it, through the forwarder.
type relayLeader struct{ s *Server }

func (l relayLeader) Epoch() context.Context { return l.s.forward.Epoch() }

func (l relayLeader) Addr(ctx context.Context) (string, error) { return l.s.forward.LeaderAddr(ctx) }

// Watch opens req at addr as a call this node forwards.
func (l relayLeader) Watch(ctx context.Context, addr string, req *connect.Request[fencedv1.WatchRequest]) (*connect.ServerStreamForClient[fencedv1.WatchResponse], error) {
	req.Header().Set(api.ForwardedHeader, l.s.cfg.NodeID)
	return l.s.forward.LeaseClient(addr).Watch(ctx, req)
}

// publishRelayed hands a rejection the leader recorded to this node's
// rejection watchers.
func (s *Server) publishRelayed(e *fencedv1.Rejection) { s.hub.PublishRelayed(rejectedEvent(e, 0)) }

// serveRelay serves another node's relay: rejections.ServeRelay of this
// node's hub.
func (s *Server) serveRelay(ctx context.Context, stream *connect.ServerStream[fencedv1.WatchResponse]) error {
	return rejections.ServeRelay(ctx, s.hub, s.cfg.StreamWriteTimeout, stream)
}
