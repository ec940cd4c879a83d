package fence_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"go.etcd.io/bbolt"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencebolt"
	"github.com/fencedio/fenced/internal/scopetest"
)

func TestValidateScope(t *testing.T) {
	t.Parallel()
	for _, tc := range scopetest.Cases {
		t.Run(tc.Name, func(t *testing.T) {
			err := fence.ValidateScope(tc.Scope)
			if tc.Valid {
				if err != nil {
					t.Fatalf("ValidateScope = %v, want nil", err)
				}
				return
			}
			var se *fence.ScopeError
			if !errors.Is(err, fence.ErrInvalidScope) || !errors.As(err, &se) {
				t.Fatalf("ValidateScope = %v, want a *ScopeError matching ErrInvalidScope", err)
			}
			// The message says what is wrong without echoing the scope.
			if se.Reason == "" || len(err.Error()) > 200 || (len(tc.Scope) > 3 && strings.Contains(err.Error(), tc.Scope)) {
				t.Errorf("message %q: want a short reason that does not quote the scope", err)
			}
		})
	}
	for _, tc := range []struct{ scope, reason string }{
		{"", "is empty"},
		{strings.Repeat("k", 513), "is 513 bytes, the limit is 512"},
		{"a\xffb", "is not valid UTF-8"},
		{"ab\u200bc", "has the non-printable character U+200B at byte 2"},
		{"a\x00", "has the non-printable character U+0000 at byte 1"},
	} {
		var se *fence.ScopeError
		if err := fence.ValidateScope(tc.scope); !errors.As(err, &se) || se.Reason != tc.reason {
			t.Errorf("ValidateScope(%.20q) = %v, want reason %q", tc.scope, err, tc.reason)
		}
	}
}

// scopeGuard is one way of using a guard, run with every scope case.
type scopeGuard struct {
	name string
	do   func(ctx context.Context, scope string, token uint64, apply func() error) error
	g    fence.Guard
}

func TestGuardsApplyTheScopeRule(t *testing.T) {
	t.Parallel()
	bolt := openBolt(t, filepath.Join(t.TempDir(), "fence.db"), fencebolt.Config{})
	mem := fence.NewMemory(fence.MemoryConfig{})
	guards := []scopeGuard{
		{"memory", func(ctx context.Context, s string, tok uint64, apply func() error) error {
			return mem.Do(ctx, s, tok, func(context.Context) error { return apply() })
		}, mem},
		{"bolt Do", func(ctx context.Context, s string, tok uint64, apply func() error) error {
			return bolt.Do(ctx, s, tok, func(context.Context) error { return apply() })
		}, bolt},
		{"bolt DoTx", func(ctx context.Context, s string, tok uint64, apply func() error) error {
			return bolt.DoTx(ctx, s, tok, func(*bbolt.Tx) error { return apply() })
		}, bolt},
	}
	for i, gd := range guards {
		token := uint64(i + 1) // each use raises every valid scope
		t.Run(gd.name, func(t *testing.T) {
			for _, tc := range scopetest.Cases {
				runScopeCase(t, gd.g, tc, token, gd.do)
			}
		})
	}
	if err := fence.Check("a\u200bb", 5, 0); !errors.Is(err, fence.ErrInvalidScope) {
		t.Errorf("Check with U+200B = %v, want ErrInvalidScope", err)
	}
}

func runScopeCase(t *testing.T, g fence.Guard, tc scopetest.Case, token uint64,
	do func(ctx context.Context, scope string, token uint64, apply func() error) error) {
	t.Helper()
	ctx := context.Background()
	called := false
	err := do(ctx, tc.Scope, token, func() error { called = true; return nil })
	h, herr := g.Highest(ctx, tc.Scope)
	if tc.Valid {
		if err != nil || !called {
			t.Errorf("%s: Do = %v, applied %v; want applied", tc.Name, err, called)
		}
		if herr != nil || h != token {
			t.Errorf("%s: Highest = %d, %v; want %d", tc.Name, h, herr, token)
		}
		return
	}
	if !errors.Is(err, fence.ErrInvalidScope) || called {
		t.Errorf("%s: Do = %v, applied %v; want ErrInvalidScope, not applied", tc.Name, err, called)
	}
	if !errors.Is(herr, fence.ErrInvalidScope) {
		t.Errorf("%s: Highest = %d, %v; want ErrInvalidScope", tc.Name, h, herr)
	}
}
