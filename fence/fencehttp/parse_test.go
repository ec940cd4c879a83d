package fencehttp_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencehttp"
	"github.com/fencedio/fenced/internal/scopetest"
)

func TestParseToken(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want uint64
		err  error
	}{
		{in: "1", want: 1},
		{in: "42", want: 42},
		{in: "10", want: 10},
		{in: "18446744073709551615", want: 1<<64 - 1},
		{in: "", err: fence.ErrNoToken},
		{in: "0", err: fencehttp.ErrInvalidToken},
		{in: "000", err: fencehttp.ErrInvalidToken},
		{in: "007", err: fencehttp.ErrInvalidToken}, // one spelling per token
		{in: "01", err: fencehttp.ErrInvalidToken},
		{in: "018446744073709551615", err: fencehttp.ErrInvalidToken},
		{in: "+1", err: fencehttp.ErrInvalidToken},
		{in: "-1", err: fencehttp.ErrInvalidToken},
		{in: " 1", err: fencehttp.ErrInvalidToken},
		{in: "1 ", err: fencehttp.ErrInvalidToken},
		{in: "1\t", err: fencehttp.ErrInvalidToken},
		{in: "1_000", err: fencehttp.ErrInvalidToken},
		{in: "0x10", err: fencehttp.ErrInvalidToken},
		{in: "1e3", err: fencehttp.ErrInvalidToken},
		{in: "1.0", err: fencehttp.ErrInvalidToken},
		{in: "abc", err: fencehttp.ErrInvalidToken},
		{in: "٣", err: fencehttp.ErrInvalidToken}, // a non-ASCII digit
		{in: "18446744073709551616", err: fencehttp.ErrInvalidToken},
		{in: strings.Repeat("9", 100), err: fencehttp.ErrInvalidToken},
	}
	for _, tt := range tests {
		got, err := fencehttp.ParseToken(tt.in)
		if tt.err != nil {
			if !errors.Is(err, tt.err) {
				t.Errorf("ParseToken(%q) = %d, %v; want error matching %v", tt.in, got, err, tt.err)
			}
			// Missing and malformed get different answers, so they must not overlap.
			if errors.Is(err, fence.ErrNoToken) && errors.Is(err, fencehttp.ErrInvalidToken) {
				t.Errorf("ParseToken(%q) error %v matches both ErrNoToken and ErrInvalidToken", tt.in, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseToken(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
		}
	}
}

// The header parser and the middleware apply fence.ValidateScope, the rule
// of lease keys, to Fencing-Scope: every edge case gets the same verdict, and
// an invalid scope is a 400 with nothing applied.
func TestScopeRule(t *testing.T) {
	t.Parallel()
	g := fence.NewMemory(fence.MemoryConfig{})
	var applied atomic.Int32
	mw := fencehttp.Middleware(g, fencehttp.Config{})(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { applied.Add(1) }))
	for _, tc := range scopetest.Cases {
		t.Run(tc.Name, func(t *testing.T) {
			h := http.Header{fencehttp.HeaderScope: {tc.Scope}, fencehttp.HeaderToken: {"9"}}
			scope, token, err := fencehttp.FromHeader(h)
			if tc.Valid && (err != nil || scope != tc.Scope || token != 9) {
				t.Errorf("FromHeader = %d, %v; want the scope and 9", token, err)
			}
			if !tc.Valid && !errors.Is(err, fence.ErrInvalidScope) {
				t.Errorf("FromHeader = %d, %v; want ErrInvalidScope", token, err)
			}

			// Straight into the handler: net/http's client cannot send
			// several of these values, other clients can.
			before := applied.Load()
			req := httptest.NewRequest(http.MethodPut, "/x", strings.NewReader("v"))
			req.Header = h
			rec := httptest.NewRecorder()
			mw.ServeHTTP(rec, req)
			want, runs := http.StatusOK, int32(1)
			if !tc.Valid {
				want, runs = http.StatusBadRequest, 0
			}
			if rec.Code != want {
				t.Fatalf("middleware status %d %s; want %d", rec.Code, rec.Body, want)
			}
			if got := applied.Load() - before; got != runs {
				t.Errorf("handler ran %d times; want %d", got, runs)
			}
			if !tc.Valid {
				p, err := fencehttp.DecodeProblem(rec.Body)
				if err != nil || p.Type != fencehttp.ProblemInvalidScope {
					t.Errorf("problem %+v, %v; want type %s", p, err, fencehttp.ProblemInvalidScope)
				}
			}
		})
	}
}

func TestFromHeader(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		header http.Header
		scope  string
		token  uint64
		err    error
	}{
		{name: "valid", header: http.Header{"Fencing-Scope": {"s"}, "Fencing-Token": {"9"}}, scope: "s", token: 9},
		{name: "nothing", header: http.Header{}, err: fence.ErrNoToken},
		{name: "scope only", header: http.Header{"Fencing-Scope": {"s"}}, err: fence.ErrNoToken},
		{name: "empty token", header: http.Header{"Fencing-Scope": {"s"}, "Fencing-Token": {""}}, err: fence.ErrNoToken},
		{name: "token only", header: http.Header{"Fencing-Token": {"9"}}, err: fence.ErrInvalidScope},
		{name: "two tokens", header: http.Header{"Fencing-Scope": {"s"}, "Fencing-Token": {"9", "10"}}, err: fencehttp.ErrInvalidToken},
		{name: "two scopes", header: http.Header{"Fencing-Scope": {"s", "t"}, "Fencing-Token": {"9"}}, err: fence.ErrInvalidScope},
		{name: "bad token", header: http.Header{"Fencing-Scope": {"s"}, "Fencing-Token": {"x"}}, err: fencehttp.ErrInvalidToken},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			scope, token, err := fencehttp.FromHeader(tt.header)
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Fatalf("FromHeader = %q, %d, %v; want error matching %v", scope, token, err, tt.err)
				}
				return
			}
			if err != nil || scope != tt.scope || token != tt.token {
				t.Fatalf("FromHeader = %q, %d, %v; want %q, %d", scope, token, err, tt.scope, tt.token)
			}
		})
	}
}
