package rejections

import (
	"context"
	"net/http"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/api/fenced/v1/fencedv1connect"
)

// Service serves RejectionService on any node. Rejections are recorded by
// the leader, so that one node sees those of every resource; a node that
// does not lead forwards the call to it, with the principal authenticated
// here. With no leader to forward to, a report is recorded where it
// arrived rather than lost, and a list answers from here. Its fields are
// set before its first call.
type Service struct {
	Book  *Book
	Rules Rules // the checks of a report's fields, and of a list's prefix (Rules.Key)
	// Wire is err as a caller gets it: with its Connect code.
	Wire func(err error) error
	// MayReport and MayRead return the error that refuses ctx's caller the
	// reporting of rejections under scope, or the reading of those under
	// prefix; nil when it may.
	MayReport func(ctx context.Context, scope string) error
	MayRead   func(ctx context.Context, prefix string) error
	// Record records a validated report and publishes a REJECTED event of
	// each entry, and returns the number of rejections recorded.
	Record func(ctx context.Context, rs []*fencedv1.StaleRejection) uint64
	// Leader returns a client of the leader's RejectionService, or nil when
	// this node serves the call with headers h itself: it leads, the call
	// was forwarded to it, or no leader is known.
	Leader func(ctx context.Context, h http.Header) fencedv1connect.RejectionServiceClient
	// Forward runs call, a call to the leader, as the node forwards calls:
	// ended by a leader change, its failures to reach the leader answered
	// as the node answers them.
	Forward func(ctx context.Context, call func(context.Context) error) error
	// Name sets on h, the headers of a call forwarded for ctx's caller,
	// this node's name, the caller's principal and its address.
	Name func(ctx context.Context, h http.Header)
}

var _ fencedv1connect.RejectionServiceHandler = (*Service)(nil)

// forwarded is the request this node sends the leader for a call whose
// context is ctx.
func forwarded[T any](ctx context.Context, v *Service, msg *T) *connect.Request[T] {
	req := connect.NewRequest(msg)
	v.Name(ctx, req.Header())
	return req
}

// forward runs call at the leader, through Service.Forward.
func forward[T any](ctx context.Context, v *Service, call func(context.Context) (*connect.Response[T], error)) (*connect.Response[T], error) {
	var resp *connect.Response[T]
	err := v.Forward(ctx, func(ctx context.Context) (err error) {
		resp, err = call(ctx)
		return err
	})
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// ReportRejections records a report whose entries all pass Validate and
// the caller may report, at the leader.
func (v *Service) ReportRejections(ctx context.Context, req *connect.Request[fencedv1.ReportRejectionsRequest]) (*connect.Response[fencedv1.ReportRejectionsResponse], error) {
	rs := req.Msg.GetRejections()
	if err := Validate(rs, v.Rules); err != nil {
		v.Book.CountReport(Invalid)
		return nil, v.Wire(err)
	}
	for _, r := range rs {
		if err := v.MayReport(ctx, r.GetScope()); err != nil {
			v.Book.CountReport(Denied)
			return nil, v.Wire(err)
		}
	}
	if rpc := v.Leader(ctx, req.Header()); rpc != nil {
		return forward(ctx, v, func(ctx context.Context) (*connect.Response[fencedv1.ReportRejectionsResponse], error) {
			return rpc.ReportRejections(ctx, forwarded(ctx, v, req.Msg))
		})
	}
	v.Book.CountReport(Recorded)
	n := v.Record(ctx, rs)
	return connect.NewResponse(&fencedv1.ReportRejectionsResponse{Recorded: n}), nil
}

// ListRejections lists the leader's rejections under a prefix the caller
// may read.
func (v *Service) ListRejections(ctx context.Context, req *connect.Request[fencedv1.ListRejectionsRequest]) (*connect.Response[fencedv1.ListRejectionsResponse], error) {
	prefix := req.Msg.GetPrefix()
	if prefix != "" {
		if err := v.Rules.Key(prefix); err != nil {
			return nil, v.Wire(err)
		}
	}
	if req.Msg.GetLimit() < 0 {
		return nil, v.Wire(v.Rules.Invalid("limit %d is negative", req.Msg.GetLimit()))
	}
	if err := v.MayRead(ctx, prefix); err != nil {
		return nil, v.Wire(err)
	}
	if rpc := v.Leader(ctx, req.Header()); rpc != nil {
		return forward(ctx, v, func(ctx context.Context) (*connect.Response[fencedv1.ListRejectionsResponse], error) {
			return rpc.ListRejections(ctx, forwarded(ctx, v, req.Msg))
		})
	}
	list, total := v.Book.List(prefix, int(req.Msg.GetLimit()))
	return connect.NewResponse(&fencedv1.ListRejectionsResponse{Rejections: list, Total: total}), nil
}

// List is ListRejections for the dashboard's JSON view (ListHandler).
func (v *Service) List(ctx context.Context, req *fencedv1.ListRejectionsRequest) (*fencedv1.ListRejectionsResponse, error) {
	resp, err := v.ListRejections(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}
