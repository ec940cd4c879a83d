package fencehttp_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencehttp"
)

// TestMiddlewareCredentialsInContext checks that the handler of a fenced
// request reads the checked scope and token from its context (the scope
// Config.ScopeFunc chose, not the header's), and that other requests carry
// none.
func TestMiddlewareCredentialsInContext(t *testing.T) {
	t.Parallel()
	type seen struct {
		scope         string
		token         uint64
		okScope, okTk bool
	}
	var got seen
	h := http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		got.scope, got.okScope = fencehttp.ScopeFromContext(r.Context())
		got.token, got.okTk = fencehttp.TokenFromContext(r.Context())
	})
	byPath := fencehttp.Config{ScopeFunc: func(r *http.Request) (string, error) {
		return "objects/" + strings.TrimPrefix(r.URL.Path, "/"), nil
	}}
	for _, tc := range []struct {
		name   string
		cfg    fencehttp.Config
		method string
		want   seen
	}{
		{"header scope", fencehttp.Config{}, http.MethodPut, seen{"orders/7", 18446744073709551615, true, true}},
		{"scope func", byPath, http.MethodPost, seen{"objects/a", 18446744073709551615, true, true}},
		{"safe method", fencehttp.Config{}, http.MethodGet, seen{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got = seen{}
			req := httptest.NewRequest(tc.method, "/a", nil)
			req.Header = fencedHeader("orders/7", "18446744073709551615")
			rec := httptest.NewRecorder()
			fencehttp.Middleware(fence.NewMemory(fence.MemoryConfig{}), tc.cfg)(h).ServeHTTP(rec, req)
			if rec.Code != http.StatusOK {
				t.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
			if got != tc.want {
				t.Fatalf("handler saw %+v; want %+v", got, tc.want)
			}
		})
	}
}
