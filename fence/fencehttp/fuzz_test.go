package fencehttp_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencehttp"
)

// FuzzFromHeader feeds the guard's header parsing arbitrary Fencing-Scope
// and Fencing-Token values, once or twice each: FromHeader either refuses
// them with one of its documented errors or returns exactly what was sent,
// and the middleware runs the handler, and raises the highest token, only
// for headers FromHeader accepts. Seeds: testdata/fuzz/FuzzFromHeader.
func FuzzFromHeader(f *testing.F) {
	f.Add("orders/7", "42", false, false)
	f.Add("", "", false, false)
	f.Add("a", "18446744073709551615", false, false)
	f.Add("a", "18446744073709551616", false, false)
	f.Add("a", "007", true, false)
	f.Add("a\x00b", "1", false, true)
	f.Fuzz(func(t *testing.T, scope, token string, twiceScope, twiceToken bool) {
		h := http.Header{}
		h.Set(fencehttp.HeaderScope, scope)
		h.Set(fencehttp.HeaderToken, token)
		if twiceScope {
			h.Add(fencehttp.HeaderScope, scope)
		}
		if twiceToken {
			h.Add(fencehttp.HeaderToken, token)
		}
		gotScope, gotToken, err := fencehttp.FromHeader(h)
		if err != nil {
			if !errors.Is(err, fence.ErrNoToken) && !errors.Is(err, fencehttp.ErrInvalidToken) && !errors.Is(err, fence.ErrInvalidScope) {
				t.Fatalf("FromHeader(%q, %q): undocumented error %v", scope, token, err)
			}
		} else {
			if twiceScope || twiceToken {
				t.Fatalf("FromHeader accepted a repeated header: %q %q", scope, token)
			}
			if gotScope != scope || fence.ValidateScope(gotScope) != nil {
				t.Fatalf("FromHeader(%q) returned scope %q", scope, gotScope)
			}
			if gotToken == 0 || token != strconv.FormatUint(gotToken, 10) {
				t.Fatalf("FromHeader(%q) returned token %d", token, gotToken)
			}
		}

		g := fence.NewMemory(fence.MemoryConfig{})
		ran := false
		h2 := fencehttp.Middleware(g, fencehttp.Config{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { ran = true }))
		req := httptest.NewRequest(http.MethodPost, "/", nil)
		req.Header = h
		rec := httptest.NewRecorder()
		h2.ServeHTTP(rec, req)
		if ran != (err == nil) {
			t.Fatalf("handler ran %v for headers FromHeader judged %v (status %d)", ran, err, rec.Code)
		}
		if err == nil {
			if hi, _ := g.Highest(context.Background(), gotScope); hi != gotToken {
				t.Fatalf("highest of %q is %d after accepting token %d", gotScope, hi, gotToken)
			}
		} else if rec.Code < 400 || rec.Code >= 500 {
			t.Fatalf("refused headers answered %d", rec.Code)
		}
	})
}
