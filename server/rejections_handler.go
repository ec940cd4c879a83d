package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/api/fenced/v1/fencedv1connect"
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
	if h.Get(forwardedHeader) != "" || s.raft.State() == raft.Leader {
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
	mux.Handle("GET /v1/rejections", s.authenticate(http.HandlerFunc(s.serveRejections), peer))
}

func (v *rejectionService) ReportRejections(ctx context.Context, req *connect.Request[fencedv1.ReportRejectionsRequest]) (*connect.Response[fencedv1.ReportRejectionsResponse], error) {
	rs := req.Msg.GetRejections()
	if err := validateReport(rs); err != nil {
		v.s.rejections.reports.WithLabelValues("invalid").Inc()
		return nil, connectError(err)
	}
	for _, r := range rs {
		if _, err := v.s.authorize(ctx, PermReport, r.GetScope()); err != nil {
			v.s.rejections.reports.WithLabelValues("denied").Inc()
			return nil, connectError(err)
		}
	}
	if rpc := v.leader(ctx, req.Header()); rpc != nil {
		return forwardCall(v.s.forward, ctx, func(ctx context.Context) (*connect.Response[fencedv1.ReportRejectionsResponse], error) {
			return rpc.ReportRejections(ctx, forwarded(ctx, v.s, req.Msg))
		})
	}
	v.s.rejections.reports.WithLabelValues("recorded").Inc()
	n := v.s.recordRejections(ctx, rs)
	return connect.NewResponse(&fencedv1.ReportRejectionsResponse{Recorded: n}), nil
}

func (v *rejectionService) ListRejections(ctx context.Context, req *connect.Request[fencedv1.ListRejectionsRequest]) (*connect.Response[fencedv1.ListRejectionsResponse], error) {
	prefix := req.Msg.GetPrefix()
	if prefix != "" {
		if err := validateKey(prefix); err != nil {
			return nil, connectError(err)
		}
	}
	if req.Msg.GetLimit() < 0 {
		return nil, connectError(invalidf("limit %d is negative", req.Msg.GetLimit()))
	}
	if _, err := v.s.authorize(ctx, PermRead, prefix); err != nil {
		return nil, connectError(err)
	}
	if rpc := v.leader(ctx, req.Header()); rpc != nil {
		return forwardCall(v.s.forward, ctx, func(ctx context.Context) (*connect.Response[fencedv1.ListRejectionsResponse], error) {
			return rpc.ListRejections(ctx, forwarded(ctx, v.s, req.Msg))
		})
	}
	limit := int(req.Msg.GetLimit())
	if limit == 0 {
		limit = defaultRejectionList
	}
	list, total := v.s.rejections.list(prefix, limit, func(string) bool { return true })
	return connect.NewResponse(&fencedv1.ListRejectionsResponse{Rejections: list, Total: total}), nil
}

// rejectionJSON is a rejection as the dashboard reads it; tokens are
// strings because JavaScript numbers lose precision above 2^53.
type rejectionJSON struct {
	Scope            string `json:"scope"`
	Resource         string `json:"resource"`
	PresentedToken   string `json:"presentedToken"`
	PresentedOwner   string `json:"presentedOwner"`
	PresentedGranted int64  `json:"presentedGrantedUnixMs"`
	HighestToken     string `json:"highestToken"`
	HighestOwner     string `json:"highestOwner"`
	HighestGranted   int64  `json:"highestGrantedUnixMs"`
	ReportedOwner    string `json:"reportedOwner"`
	Count            uint64 `json:"count"`
	ScopeCount       uint64 `json:"scopeCount"`
	ResourceCount    uint64 `json:"resourceCount"`
	FirstUnixMs      int64  `json:"firstUnixMs"`
	LastUnixMs       int64  `json:"lastUnixMs"`
}

// serveRejections answers GET /v1/rejections?prefix=&limit= for the
// dashboard: ListRejections as JSON, under the same rules.
func (s *Server) serveRejections(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, _ := strconv.Atoi(q.Get("limit"))
	resp, err := (&rejectionService{s: s}).ListRejections(r.Context(),
		connect.NewRequest(&fencedv1.ListRejectionsRequest{Prefix: q.Get("prefix"), Limit: int32(min(max(limit, 0), maxRejectionEntries))}))
	if err != nil {
		status := http.StatusBadRequest
		if ce := new(connect.Error); errors.As(err, &ce) {
			switch ce.Code() {
			case connect.CodeUnauthenticated:
				status = http.StatusUnauthorized
			case connect.CodePermissionDenied:
				status = http.StatusForbidden
			case connect.CodeUnavailable:
				status = http.StatusServiceUnavailable
			}
		}
		http.Error(w, err.Error(), status)
		return
	}
	out := struct {
		Total      uint64          `json:"total"`
		Rejections []rejectionJSON `json:"rejections"`
	}{Total: resp.Msg.GetTotal(), Rejections: make([]rejectionJSON, 0, len(resp.Msg.GetRejections()))}
	for _, e := range resp.Msg.GetRejections() {
		out.Rejections = append(out.Rejections, rejectionJSON{
			Scope: e.Scope, Resource: e.Resource,
			PresentedToken: strconv.FormatUint(e.PresentedToken, 10), PresentedOwner: e.PresentedOwner,
			PresentedGranted: e.PresentedGrantedUnixMs,
			HighestToken:     strconv.FormatUint(e.HighestToken, 10), HighestOwner: e.HighestOwner,
			HighestGranted: e.HighestGrantedUnixMs, ReportedOwner: e.ReportedOwner,
			Count: e.Count, ScopeCount: e.ScopeCount, ResourceCount: e.ResourceCount,
			FirstUnixMs: e.FirstUnixMs, LastUnixMs: e.LastUnixMs,
		})
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(out)
}
