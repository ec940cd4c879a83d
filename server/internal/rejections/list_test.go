package rejections

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
)

// The dashboard's view: the list as JSON with tokens as strings (exact
// beyond 2^53), the limit clamped into 0..MaxEntries.
func TestListHandler(t *testing.T) {
	var asked *fencedv1.ListRejectionsRequest
	h := ListHandler(func(_ context.Context, req *fencedv1.ListRejectionsRequest) (*fencedv1.ListRejectionsResponse, error) {
		asked = req
		return &fencedv1.ListRejectionsResponse{Total: 7, Rejections: []*fencedv1.Rejection{
			{Scope: "a/1", PresentedToken: 1<<60 + 1, HighestToken: 1<<60 + 3, Count: 7, PresentedOwner: "w"},
		}}, nil
	})
	for query, limit := range map[string]int32{"": 0, "limit=5": 5, "limit=-3": 0, "limit=x": 0, "limit=5000": MaxEntries} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/v1/rejections?prefix=a/&"+query, nil))
		if w.Code != http.StatusOK || asked.GetLimit() != limit || asked.GetPrefix() != "a/" {
			t.Errorf("%q: %d, asked %v; want limit %d", query, w.Code, asked, limit)
		}
		var out struct {
			Total      uint64
			Rejections []map[string]any
		}
		if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil {
			t.Fatal(err)
		}
		if out.Total != 7 || len(out.Rejections) != 1 || out.Rejections[0]["presentedToken"] != "1152921504606846977" ||
			out.Rejections[0]["highestToken"] != "1152921504606846979" || out.Rejections[0]["presentedOwner"] != "w" {
			t.Errorf("%q: %s", query, w.Body)
		}
		if w.Header().Get("Cache-Control") != "no-store" {
			t.Errorf("%q: Cache-Control %q", query, w.Header().Get("Cache-Control"))
		}
	}
}

func TestListHandlerErrors(t *testing.T) {
	for err, want := range map[error]int{
		connect.NewError(connect.CodeUnauthenticated, errors.New("who")):    http.StatusUnauthorized,
		connect.NewError(connect.CodePermissionDenied, errors.New("no")):    http.StatusForbidden,
		connect.NewError(connect.CodeUnavailable, errors.New("no leader")):  http.StatusServiceUnavailable,
		connect.NewError(connect.CodeInvalidArgument, errors.New("prefix")): http.StatusBadRequest,
		errors.New("plain"): http.StatusBadRequest,
	} {
		h := ListHandler(func(context.Context, *fencedv1.ListRejectionsRequest) (*fencedv1.ListRejectionsResponse, error) {
			return nil, err
		})
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/v1/rejections", nil))
		if w.Code != want {
			t.Errorf("%v: status %d, want %d", err, w.Code, want)
		}
	}
}
