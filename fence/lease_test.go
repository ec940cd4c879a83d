package fence_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"

	"go.etcd.io/bbolt"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencebolt"
)

// testLease is a fence.Lease that remembers what it was told.
type testLease struct {
	key   string
	token uint64
	mu    sync.Mutex
	lost  []error
}

func (l *testLease) Key() string   { return l.key }
func (l *testLease) Token() uint64 { return l.token }
func (l *testLease) MarkLost(err error) {
	l.mu.Lock()
	l.lost = append(l.lost, err)
	l.mu.Unlock()
}

func (l *testLease) losses() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]error(nil), l.lost...)
}

// TestDoLease checks the lease-taking forms of the in-process guards: the
// lease's key and token are used, a stale rejection (the guard's, or one
// returned by apply) reaches MarkLost, and nothing else does.
func TestDoLease(t *testing.T) {
	t.Parallel()
	bolt, err := fencebolt.Open(filepath.Join(t.TempDir(), "g.db"), fencebolt.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bolt.Close() })
	mem := fence.NewMemory(fence.MemoryConfig{})
	guards := map[string]func(context.Context, *testLease, func(context.Context) error) error{
		"Memory.DoLease": func(ctx context.Context, l *testLease, f func(context.Context) error) error {
			return mem.DoLease(ctx, l, f)
		},
		"Bolt.DoLease": func(ctx context.Context, l *testLease, f func(context.Context) error) error {
			return bolt.DoLease(ctx, l, f)
		},
		"Bolt.DoTxLease": func(ctx context.Context, l *testLease, f func(context.Context) error) error {
			return bolt.DoTxLease(ctx, l, func(*bbolt.Tx) error { return f(ctx) })
		},
		"DoLease(Memory)": func(ctx context.Context, l *testLease, f func(context.Context) error) error {
			return fence.DoLease(ctx, mem, l, f)
		},
	}
	for name, do := range guards {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			scope := "orders/" + name
			old, cur := &testLease{key: scope, token: 3}, &testLease{key: scope, token: 4}
			applied := 0
			apply := func(context.Context) error { applied++; return nil }
			if err := do(ctx, old, apply); err != nil {
				t.Fatal(err)
			}
			if err := do(ctx, cur, apply); err != nil {
				t.Fatal(err)
			}
			err := do(ctx, old, apply)
			var stale *fence.StaleTokenError
			if !errors.As(err, &stale) || *stale != (fence.StaleTokenError{Scope: scope, Presented: 3, Highest: 4}) {
				t.Fatalf("old lease: %v, want stale 3 < 4", err)
			}
			if applied != 2 {
				t.Fatalf("apply ran %d times, want 2", applied)
			}
			if ls := old.losses(); len(ls) != 1 || ls[0] != err {
				t.Fatalf("old lease MarkLost calls %v, want [%v]", ls, err)
			}
			boom := errors.New("boom")
			if err := do(ctx, cur, func(context.Context) error { return boom }); !errors.Is(err, boom) {
				t.Fatalf("failing apply: %v", err)
			}
			if ls := cur.losses(); len(ls) != 0 {
				t.Fatalf("current lease told it is lost: %v", ls)
			}
			nested := &fence.StaleTokenError{Scope: "other", Presented: 1, Highest: 2}
			if err := do(ctx, cur, func(context.Context) error { return nested }); !errors.Is(err, fence.ErrStaleToken) {
				t.Fatalf("apply returning stale: %v", err)
			}
			if ls := cur.losses(); len(ls) != 1 {
				t.Fatalf("stale error from apply: MarkLost calls %v, want 1", ls)
			}
		})
	}
}
