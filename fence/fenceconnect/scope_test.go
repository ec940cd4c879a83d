package fenceconnect_test

import (
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/internal/scopetest"
)

// sendable reports whether net/http's client can carry s in a header at all:
// it refuses control bytes, and servers refuse headers of many kilobytes.
func sendable(s string) bool {
	return len(s) < 4096 && !strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f })
}

// The interceptor applies fence.ValidateScope to the fencing-scope header:
// every scope case the transport can carry gets the rule's verdict.
func TestInterceptorScopeRule(t *testing.T) {
	t.Parallel()
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			g := fence.NewMemory(fence.MemoryConfig{})
			e := newEnv(t, p, g, nil)
			sent := 0
			for _, tc := range scopetest.Cases {
				if !sendable(tc.Scope) {
					continue
				}
				sent++
				_, err := e.call(t.Context(), putProcedure, tc.Scope, "5", "v")
				switch {
				case tc.Valid && err != nil:
					t.Errorf("%s: %v; want success", tc.Name, err)
				case !tc.Valid && connect.CodeOf(err) != connect.CodeInvalidArgument:
					t.Errorf("%s: code %v (%v); want invalid_argument", tc.Name, connect.CodeOf(err), err)
				}
				want := 0
				if tc.Valid {
					want = 1
				}
				if n := e.store.count(tc.Scope); n != want {
					t.Errorf("%s: handler applied %d times; want %d", tc.Name, n, want)
				}
			}
			if sent < len(scopetest.Cases)/2 {
				t.Fatalf("only %d of %d cases could be sent", sent, len(scopetest.Cases))
			}
		})
	}
}
