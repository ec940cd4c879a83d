package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/api/fenced/v1/fencedv1connect"
	"github.com/fencedio/fenced/internal/failpoint"
	"github.com/fencedio/fenced/server/internal/apierr"
	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"
)

// routedService serves the lease API on any node: locally on the leader,
// by forwarding elsewhere (the node's Forwarding).
type routedService struct {
	local *service
	*Deps
}

var _ fencedv1connect.LeaseServiceHandler = (*routedService)(nil)

// routeCall serves one call where it belongs. leader returns a client of
// the leader's service, or ok false when this node serves the call itself
// (local). A call this node failed because it does not, or no longer,
// lead goes to the leader instead (retryAtLeader), up to 3 tries in all.
func routeCall[C, Req, Resp any](ctx context.Context, d *Deps, req *connect.Request[Req],
	leader func(context.Context, http.Header) (rpc C, ok bool, err error),
	remote func(C, context.Context, *connect.Request[Req]) (*connect.Response[Resp], error),
	local func(context.Context, *connect.Request[Req]) (*connect.Response[Resp], error),
) (*connect.Response[Resp], error) {
	return routeTries(ctx, d, req, leader, remote,
		func(ctx context.Context, req *connect.Request[Req]) (*connect.Response[Resp], *connect.Request[Req], error) {
			resp, err := local(ctx, req)
			if d.retryAtLeader(err, req.Header()) {
				return resp, req, err
			}
			return resp, nil, err
		},
		func(err error, _ int) error { return err })
}

// routeTries is routeCall's loop. local returns, with its answer, the
// request to send the leader instead, or nil when its answer stands;
// answer sees every answer with the number of tries before it.
func routeTries[C, Req, Resp any](ctx context.Context, d *Deps, req *connect.Request[Req],
	leader func(context.Context, http.Header) (rpc C, ok bool, err error),
	remote func(C, context.Context, *connect.Request[Req]) (*connect.Response[Resp], error),
	local func(context.Context, *connect.Request[Req]) (*connect.Response[Resp], *connect.Request[Req], error),
	answer func(err error, retries int) error,
) (*connect.Response[Resp], error) {
	for try := range 3 {
		rpc, ok, err := leader(ctx, req.Header())
		if err != nil {
			return nil, answer(err, try)
		}
		if ok {
			// Only this branch's own copies may escape with the closure:
			// capturing the loop's rpc would move it to the heap on every
			// call, forwarded or not.
			rpc, req := rpc, req
			var resp *connect.Response[Resp]
			err := d.Forward.Forward(ctx, func(ctx context.Context) (err error) {
				resp, err = remote(rpc, ctx, forwarded(ctx, d, req))
				return err
			})
			if err != nil {
				resp = nil
			}
			return resp, answer(err, try)
		}
		resp, next, err := local(ctx, req)
		if next == nil {
			return resp, answer(err, try)
		}
		req = next
	}
	return nil, answer(apierr.Connect(apierr.ErrNotReady), 3)
}

// route decides where a lease call goes: ok is false when this node
// serves it.
func (r *routedService) route(ctx context.Context, h http.Header) (fencedv1connect.LeaseServiceClient, bool, error) {
	if r.Leader.Ready() {
		return nil, false, nil
	}
	if h.Get(ForwardedHeader) != "" {
		// Forwarded here by a node that took this one for the leader.
		if r.Leader.Leading() {
			r.Leader.AwaitServing(ctx) // then served here, refused if this node still does not serve
			return nil, false, nil
		}
		return nil, false, apierr.Connect(apierr.ErrNotReady)
	}
	if r.Leader.Leading() {
		r.Leader.AwaitServing(ctx)
		return nil, false, nil
	}
	rpc, err := r.Forward.LeaseLeader(ctx)
	if err != nil {
		return nil, false, apierr.Connect(err)
	}
	return rpc, rpc != nil, nil
}

// retryAtLeader reports whether a call the local node failed may be sent to the
// leader instead: it certainly did not take effect here, because this node
// was not (or no longer) the leader when it tried.
func (d *Deps) retryAtLeader(err error, h http.Header) bool {
	if err == nil || h.Get(ForwardedHeader) != "" || d.Leader.Leading() {
		return false
	}
	return errors.Is(err, apierr.ErrNotReady) || errors.Is(err, raft.ErrNotLeader) || errors.Is(err, apierr.ErrDeposed)
}

// forwarded is the request this node sends the leader for req, a call
// whose context is ctx: it names this node and, with auth on, the principal
// the caller authenticated as here (the leader authorizes it), and carries
// an acquisition's proposals (ProposalsHeader).
func forwarded[T any](ctx context.Context, d *Deps, req *connect.Request[T]) *connect.Request[T] {
	fwd := connect.NewRequest(req.Msg)
	d.Forward.Name(ctx, fwd.Header())
	if p := req.Header().Get(ProposalsHeader); p != "" {
		fwd.Header().Set(ProposalsHeader, p)
	}
	return fwd
}

// Acquire is routeCall where a wait this node was serving when it stopped
// leading goes on at the new leader, for what is left of it. The grants its
// attempts write are recorded in its Proposals, which go on with it: an
// attempt that finds one of them holding the key answers that the call may
// have been granted, instead of waiting behind its own lease.
func (r *routedService) Acquire(ctx context.Context, req *connect.Request[fencedv1.AcquireRequest]) (*connect.Response[fencedv1.AcquireResponse], error) {
	start := time.Now()
	owner := req.Msg.GetOwner()
	proposals := ParseProposals(req.Header().Get(ProposalsHeader))
	ctx = WithProposals(ctx, proposals)
	local := func(ctx context.Context, req *connect.Request[fencedv1.AcquireRequest]) (*connect.Response[fencedv1.AcquireResponse], *connect.Request[fencedv1.AcquireRequest], error) {
		lctx, done := r.Leader.WhileLeading(ctx)
		resp, err := r.local.Acquire(lctx, req)
		deposed := errors.Is(context.Cause(lctx), apierr.ErrDeposed)
		done()
		if err == nil || !(deposed || r.retryAtLeader(err, req.Header())) || req.Header().Get(ForwardedHeader) != "" {
			return resp, nil, err
		}
		// This node stopped leading while the caller waited: go on waiting
		// at the new leader for what is left of the wait.
		msg := proto.CloneOf(req.Msg)
		if msg.WaitMs > 0 {
			msg.WaitMs = max(msg.WaitMs-time.Since(start).Milliseconds(), 0)
		}
		next := connect.NewRequest(msg)
		if proposals.Any() {
			next.Header().Set(ProposalsHeader, proposals.String())
		}
		return resp, next, err
	}
	return routeTries(ctx, r.Deps, req, r.route, fencedv1connect.LeaseServiceClient.Acquire, local,
		func(err error, retries int) error { return retriedAcquireError(err, retries, owner) })
}

// errMaybeGranted answers an acquisition that this node tried, stopped
// leading, and retried at the new leader without a grant to show: the first
// try may have been granted (its answer lost with the leadership), so the
// outcome is unknown. See docs/protocol.md, section 3.8.
var errMaybeGranted = fmt.Errorf("the leader changed while the acquisition was served: %w", apierr.ErrMaybeGranted)

// retriedAcquireError is the answer to a retried acquisition (attempt > 0) of owner:
// "held" by the same owner and "unavailable" become unavailable with
// errMaybeGranted, since the holder may be the earlier try's grant. Other
// answers, and first tries, stand.
func retriedAcquireError(err error, attempt int, owner string) error {
	if err == nil || attempt == 0 {
		return err
	}
	switch connect.CodeOf(err) {
	case connect.CodeUnavailable:
		return apierr.Connect(errMaybeGranted)
	case connect.CodeFailedPrecondition:
		var ce *connect.Error
		if !errors.As(err, &ce) {
			return err
		}
		for _, d := range ce.Details() {
			if m, derr := d.Value(); derr == nil {
				if h, ok := m.(*fencedv1.LeaseHeld); ok && h.GetOwner() == owner {
					return apierr.Connect(errMaybeGranted)
				}
			}
		}
	}
	return err
}

func (r *routedService) Renew(ctx context.Context, req *connect.Request[fencedv1.RenewRequest]) (*connect.Response[fencedv1.RenewResponse], error) {
	if failpoint.Enabled(failpoint.DeposedLeaderRenews) && r.Leader.EverLed() {
		return r.local.Renew(ctx, req)
	}
	return routeCall(ctx, r.Deps, req, r.route, fencedv1connect.LeaseServiceClient.Renew, r.local.Renew)
}

func (r *routedService) Release(ctx context.Context, req *connect.Request[fencedv1.ReleaseRequest]) (*connect.Response[fencedv1.ReleaseResponse], error) {
	return routeCall(ctx, r.Deps, req, r.route, fencedv1connect.LeaseServiceClient.Release, r.local.Release)
}

// Reads. Get and List are linearizable by default: the leader answers
// them after a leadership check that began after the read arrived
// (leadercheck.Check), so a read reflects every grant, release and expiry
// acknowledged before it was sent; other nodes forward them. A request with
// the header "Fenced-Stale-Read: true" is answered by whichever node gets
// it, from its own applied state, without forwarding or any check: it may
// miss recent transitions (a follower lags the leader; a deposed leader
// may not know it is deposed), and the remaining TTLs it shows are that
// node's guesses.

// staleReadHeader opts a Get or List in to possibly stale reads.
const staleReadHeader = "Fenced-Stale-Read"

func staleRead(h http.Header) bool { return h.Get(staleReadHeader) == "true" }

// confirmed is local, answered only once ConfirmRead has confirmed that
// this node still leads.
func confirmed[Req, Resp any](d *Deps, local func(context.Context, *connect.Request[Req]) (*connect.Response[Resp], error)) func(context.Context, *connect.Request[Req]) (*connect.Response[Resp], error) {
	return func(ctx context.Context, req *connect.Request[Req]) (*connect.Response[Resp], error) {
		if err := d.Leader.ConfirmRead(ctx); err != nil {
			return nil, apierr.Connect(err)
		}
		return local(ctx, req)
	}
}

func (r *routedService) Get(ctx context.Context, req *connect.Request[fencedv1.GetRequest]) (*connect.Response[fencedv1.GetResponse], error) {
	if failpoint.Enabled(failpoint.FollowerLocalRead) && !r.Leader.Ready() {
		// The mutant: a follower answers a linearizable Get from its own state.
		return read(ctx, r.Deps, req.Msg, true, r.local.checkGet, r.local.get)
	}
	if staleRead(req.Header()) {
		return read(ctx, r.Deps, req.Msg, true, r.local.checkGet, r.local.get)
	}
	return routeCall(ctx, r.Deps, req, r.route, fencedv1connect.LeaseServiceClient.Get, confirmed(r.Deps, r.local.Get))
}

func (r *routedService) List(ctx context.Context, req *connect.Request[fencedv1.ListRequest]) (*connect.Response[fencedv1.ListResponse], error) {
	if staleRead(req.Header()) {
		return read(ctx, r.Deps, req.Msg, true, r.local.checkList, r.local.list)
	}
	return routeCall(ctx, r.Deps, req, r.route, fencedv1connect.LeaseServiceClient.List, confirmed(r.Deps, r.local.List))
}

// Watch is served by every node from its own applied transitions.
func (r *routedService) Watch(ctx context.Context, req *connect.Request[fencedv1.WatchRequest], stream *connect.ServerStream[fencedv1.WatchResponse]) error {
	return r.local.Watch(ctx, req, stream)
}

// routedAdmin serves the AdminService on any node like routedService the
// lease API: Revoke is a write, served by the leader and forwarded to it
// from other nodes with the principal authenticated here.
type routedAdmin struct {
	local *adminService
	*Deps
}

var _ fencedv1connect.AdminServiceHandler = (*routedAdmin)(nil)

// leader returns a client of the leader's AdminService, or ok false when
// this node serves the call itself.
func (r *routedAdmin) leader(ctx context.Context, h http.Header) (fencedv1connect.AdminServiceClient, bool, error) {
	rpc, err := r.Forward.AdminLeader(ctx, h, r.Leader.Ready() || r.Leader.Leading())
	if err != nil || rpc == nil {
		return nil, false, err
	}
	return rpc, true, nil
}

func (r *routedAdmin) Revoke(ctx context.Context, req *connect.Request[fencedv1.RevokeRequest]) (*connect.Response[fencedv1.RevokeResponse], error) {
	return routeCall(ctx, r.Deps, req, r.leader, fencedv1connect.AdminServiceClient.Revoke, r.local.Revoke)
}
