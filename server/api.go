package server

import (
	"context"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/fencedio/fenced/api/fenced/v1/fencedv1connect"
	"github.com/fencedio/fenced/lease"
	"github.com/fencedio/fenced/server/internal/admission"
	"github.com/fencedio/fenced/server/internal/api"
	"github.com/fencedio/fenced/server/internal/fanout"
	"github.com/fencedio/fenced/server/internal/forward"
	"github.com/fencedio/fenced/server/internal/fsm"
	"github.com/fencedio/fenced/server/internal/nodemetrics"
	"github.com/fencedio/fenced/server/internal/security"
	"github.com/hashicorp/raft"
)

// The lease API's Connect handlers are internal/api's; this file mounts
// them on the node: apiNode is the node as they see it.

// apiDeps are what internal/api's handlers use of this node.
func (s *Server) apiDeps() *api.Deps {
	n := apiNode{s}
	return &api.Deps{
		Leases: n, Auth: n, State: n, Leader: n, Forward: n, Counts: s.metrics,
		Sign:               s.signature,
		AwaitCatchUp:       s.awaitCatchUp,
		ServeRelay:         s.serveRelay,
		Hub:                s.hub,
		Relay:              s.relay,
		Reads:              s.reads,
		Fanout:             s.fanout,
		Watchers:           s.watchers,
		Sessions:           s.sessions,
		AdmitCall:          s.admitStreamCall,
		ListLimit:          s.cfg.ListLimit,
		StreamWriteTimeout: s.cfg.StreamWriteTimeout,
	}
}

func (s *Server) leaseService() fencedv1connect.LeaseServiceHandler {
	return api.LeaseService(s.apiDeps())
}

func (s *Server) adminService() fencedv1connect.AdminServiceHandler {
	return api.AdminService(s.apiDeps())
}

func (s *Server) handlerOptions() []connect.HandlerOption {
	return append(fanout.Codecs(s.hub),
		connect.WithReadMaxBytes(int(s.cfg.MaxBodyBytes)),
		// Lease messages are a few hundred bytes, and a List page of 100
		// leases about 10 KiB: compressing them costs more CPU (a quarter
		// of the server's, with clients looping List) than it saves on the
		// wire. Only large Lists are compressed.
		connect.WithCompressMinBytes(64<<10),
		connect.WithInterceptors(s.observeRequests(), s.authz.Interceptor()),
	)
}

// observeRequests records latency per method and counts results.
func (s *Server) observeRequests() connect.Interceptor {
	return connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			start := time.Now()
			resp, err := next(ctx, req)
			method := req.Spec().Procedure[strings.LastIndexByte(req.Spec().Procedure, '/')+1:]
			s.metrics.ObserveRequest(method, time.Since(start))
			return resp, err
		}
	})
}

// nameForwarded sets on h, the headers of a call forwarded for ctx's
// caller, this node's ID, the caller's principal and its address.
func (s *Server) nameForwarded(ctx context.Context, h http.Header) {
	h.Set(api.ForwardedHeader, s.cfg.NodeID)
	s.authz.ForwardPrincipal(ctx, h)
	admission.ForwardClient(ctx, h)
}

// confirmRead confirms that this node still leads, after the read
// arrived.
func (s *Server) confirmRead(ctx context.Context) error {
	return s.confirmTerm(ctx, s.readyTerm.Load())
}

// apiNode is the node as internal/api's handlers use it: its lease
// operations (Acquire, Release, Revoke and Ready are the Server's own),
// authorization, state, leadership and forwarding. Its counts are the
// node's metrics (nodemetrics.Metrics).
type apiNode struct{ *Server }

var (
	_ api.Leases     = apiNode{}
	_ api.Auth       = apiNode{}
	_ api.State      = apiNode{}
	_ api.Leadership = apiNode{}
	_ api.Forwarding = apiNode{}
	_ api.Counts     = (*nodemetrics.Metrics)(nil)
)

func (n apiNode) RenewBatch(ctx context.Context, b []api.Renewal) { n.renewBatch(ctx, b) }

func (n apiNode) Authorize(ctx context.Context, need Permission, prefix string) (security.Principal, error) {
	return n.authz.Authorize(ctx, need, prefix)
}

func (n apiNode) AuthorizeAcquire(ctx context.Context, key, owner string) (string, error) {
	if err := api.ValidateKey(key); err != nil {
		return "", err
	}
	return n.authz.AuthorizeAcquire(ctx, key, owner)
}

func (n apiNode) AuthorizeRenew(ctx context.Context, key, id string) error {
	if err := api.ValidateKey(key); err != nil {
		return err
	}
	return n.authz.AuthorizeRenew(ctx, key, id)
}

func (n apiNode) Get(key string) (l lease.Lease, ok bool, last, rev uint64) {
	n.fsm.Read(func(st *lease.State) {
		l, ok = st.Get(key)
		last = st.LastToken(key)
		rev = fsm.ReadRevision(st)
	})
	return l, ok, last, rev
}

func (n apiNode) List(prefix string, limit int) ([]lease.Lease, []time.Duration, uint64) {
	view := n.fsm.View()
	leases, remaining := n.listRemaining(view, prefix, limit)
	return leases, remaining, view.Applied()
}

func (n apiNode) Remaining(key string) time.Duration { return n.remaining(key) }

func (n apiNode) Revision() uint64 { return n.fsm.Revision() }

func (n apiNode) Leading() bool { return n.raft.State() == raft.Leader }

func (n apiNode) AwaitServing(ctx context.Context) { n.awaitServing(ctx) }

func (n apiNode) WhileLeading(ctx context.Context) (context.Context, func()) {
	return n.whileLeading(ctx)
}

func (n apiNode) ConfirmRead(ctx context.Context) error { return n.confirmRead(ctx) }

func (n apiNode) EverLed() bool { return n.everLed.Load() }

func (n apiNode) LeaseLeader(ctx context.Context) (fencedv1connect.LeaseServiceClient, error) {
	return n.forward.Leader(ctx)
}

func (n apiNode) AdminLeader(ctx context.Context, h http.Header, here bool) (fencedv1connect.AdminServiceClient, error) {
	addr, err := n.forward.LeaderFor(ctx, h, here)
	if err != nil || addr == "" {
		return nil, err
	}
	return n.forward.AdminClient(addr), nil
}

func (n apiNode) Forward(ctx context.Context, call func(context.Context) error) error {
	_, err := forward.Call(n.forward, ctx, func(ctx context.Context) (*connect.Response[struct{}], error) {
		return nil, call(ctx)
	})
	return err
}

func (n apiNode) Name(ctx context.Context, h http.Header) { n.nameForwarded(ctx, h) }
