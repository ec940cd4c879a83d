package server

import (
	"context"
	"net/http"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/api/fenced/v1/fencedv1connect"
	"github.com/fencedio/fenced/server/internal/api"
	"github.com/fencedio/fenced/server/internal/apierr"
	"github.com/fencedio/fenced/server/internal/rejections"
	"github.com/hashicorp/raft"
)

// rejectionService serves RejectionService on any node. Rejections are
// recorded by the leader, so that one node sees those of every resource; a
// node that does not lead forwards the call to it, with the principal
// authenticated here. With no leader to forward to, a report is recorded
// where it arrived rather than lost, and a list answers from here.
type rejectionService struct{ s *Server }

var _ fencedv1connect.RejectionServiceHandler = (*rejectionService)(nil)

// leader returns a client of the leader's RejectionService, or nil when
// this node serves the call itself.
func (v *rejectionService) leader(ctx context.Context, h http.Header) fencedv1connect.RejectionServiceClient {
	s := v.s
	if h.Get(api.ForwardedHeader) != "" || s.raft.State() == raft.Leader {
		return nil
	}
	addr, err := s.forward.leaderAddr(ctx)
	if err != nil || addr == "" {
		return nil
	}
	return fencedv1connect.NewRejectionServiceClient(&http.Client{Transport: s.forward.transport}, "http://"+addr)
}

// registerRejections serves RejectionService and the dashboard's
// GET /v1/rejections on mux.
func (s *Server) registerRejections(mux *http.ServeMux, peer bool) {
	path, h := fencedv1connect.NewRejectionServiceHandler(&rejectionService{s: s}, s.handlerOptions()...)
	mux.Handle(path, s.limitRPC(s.authenticate(limitBody(h, s.cfg.MaxBodyBytes), peer)))
	mux.Handle("GET /v1/rejections", s.authenticate(rejections.ListHandler(s.listRejections), peer))
}

func (v *rejectionService) ReportRejections(ctx context.Context, req *connect.Request[fencedv1.ReportRejectionsRequest]) (*connect.Response[fencedv1.ReportRejectionsResponse], error) {
	rs := req.Msg.GetRejections()
	if err := rejections.Validate(rs, wireRules{}); err != nil {
		v.s.rejections.CountReport(rejections.Invalid)
		return nil, apierr.Connect(err)
	}
	for _, r := range rs {
		if _, err := v.s.authorize(ctx, PermReport, r.GetScope()); err != nil {
			v.s.rejections.CountReport(rejections.Denied)
			return nil, apierr.Connect(err)
		}
	}
	if rpc := v.leader(ctx, req.Header()); rpc != nil {
		return forwardCall(v.s.forward, ctx, func(ctx context.Context) (*connect.Response[fencedv1.ReportRejectionsResponse], error) {
			return rpc.ReportRejections(ctx, forwarded(ctx, v.s, req.Msg))
		})
	}
	v.s.rejections.CountReport(rejections.Recorded)
	n := v.s.recordRejections(ctx, rs)
	return connect.NewResponse(&fencedv1.ReportRejectionsResponse{Recorded: n}), nil
}

func (v *rejectionService) ListRejections(ctx context.Context, req *connect.Request[fencedv1.ListRejectionsRequest]) (*connect.Response[fencedv1.ListRejectionsResponse], error) {
	prefix := req.Msg.GetPrefix()
	if prefix != "" {
		if err := api.ValidateKey(prefix); err != nil {
			return nil, apierr.Connect(err)
		}
	}
	if req.Msg.GetLimit() < 0 {
		return nil, apierr.Connect(apierr.Invalidf("limit %d is negative", req.Msg.GetLimit()))
	}
	if _, err := v.s.authorize(ctx, PermRead, prefix); err != nil {
		return nil, apierr.Connect(err)
	}
	if rpc := v.leader(ctx, req.Header()); rpc != nil {
		return forwardCall(v.s.forward, ctx, func(ctx context.Context) (*connect.Response[fencedv1.ListRejectionsResponse], error) {
			return rpc.ListRejections(ctx, forwarded(ctx, v.s, req.Msg))
		})
	}
	list, total := v.s.rejections.List(prefix, int(req.Msg.GetLimit()))
	return connect.NewResponse(&fencedv1.ListRejectionsResponse{Rejections: list, Total: total}), nil
}

// listRejections is ListRejections for the dashboard's JSON view.
func (s *Server) listRejections(ctx context.Context, req *fencedv1.ListRejectionsRequest) (*fencedv1.ListRejectionsResponse, error) {
	resp, err := (&rejectionService{s: s}).ListRejections(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}
