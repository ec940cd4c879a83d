package rejections

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
)

// entryJSON is a rejection as the dashboard reads it; tokens are strings
// because JavaScript numbers lose precision above 2^53.
type entryJSON struct {
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

// ListHandler answers GET /v1/rejections?prefix=&limit= for the dashboard:
// the answer of list, the node's ListRejections, as JSON, and its errors as
// HTTP statuses. A limit that is not a number counts as none, one beyond
// MaxEntries as MaxEntries.
func ListHandler(list func(context.Context, *fencedv1.ListRejectionsRequest) (*fencedv1.ListRejectionsResponse, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		limit, _ := strconv.Atoi(q.Get("limit"))
		resp, err := list(r.Context(), &fencedv1.ListRejectionsRequest{Prefix: q.Get("prefix"), Limit: int32(min(max(limit, 0), MaxEntries))})
		if err != nil {
			http.Error(w, err.Error(), httpStatus(err))
			return
		}
		out := struct {
			Total      uint64      `json:"total"`
			Rejections []entryJSON `json:"rejections"`
		}{Total: resp.GetTotal(), Rejections: make([]entryJSON, 0, len(resp.GetRejections()))}
		for _, e := range resp.GetRejections() {
			out.Rejections = append(out.Rejections, entryJSON{
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
	})
}

// httpStatus is the status of a list's error: that of its Connect code,
// bad request for any other.
func httpStatus(err error) int {
	if ce := new(connect.Error); errors.As(err, &ce) {
		switch ce.Code() {
		case connect.CodeUnauthenticated:
			return http.StatusUnauthorized
		case connect.CodePermissionDenied:
			return http.StatusForbidden
		case connect.CodeUnavailable:
			return http.StatusServiceUnavailable
		}
	}
	return http.StatusBadRequest
}
