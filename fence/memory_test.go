package fence_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencebolt"
)

// The tests in this file hold for every Guard in the package; each runs
// against all of them.

type guardCase struct {
	name string
	open func(t testing.TB, obs fence.Observer) fence.Guard
	// ops scales the concurrency test: Bolt pays an fsync per raised token.
	ops int
}

var guardCases = []guardCase{
	{
		name: "memory",
		open: func(t testing.TB, obs fence.Observer) fence.Guard {
			return fence.NewMemory(fence.MemoryConfig{Observer: obs})
		},
		ops: 2000,
	},
	{
		name: "bolt",
		open: func(t testing.TB, obs fence.Observer) fence.Guard {
			return openBolt(t, filepath.Join(t.TempDir(), "fence.db"), fencebolt.Config{Observer: obs})
		},
		ops: 120,
	},
}

func openBolt(t testing.TB, path string, cfg fencebolt.Config) *fencebolt.Guard {
	t.Helper()
	g, err := fencebolt.Open(path, cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := g.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return g
}

var nop = func(context.Context) error { return nil }

// recorder is an Observer that keeps every decision.
type recorder struct {
	mu        sync.Mutex
	decisions []fence.Decision
}

func (r *recorder) Observe(_ context.Context, d fence.Decision) {
	r.mu.Lock()
	r.decisions = append(r.decisions, d)
	r.mu.Unlock()
}

func (r *recorder) get() []fence.Decision {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]fence.Decision(nil), r.decisions...)
}

func forEachGuard(t *testing.T, f func(t *testing.T, gc guardCase)) {
	for _, gc := range guardCases {
		t.Run(gc.name, func(t *testing.T) { f(t, gc) })
	}
}

func TestGuardInvalidInput(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		scope   string
		token   uint64
		wantErr error
	}{
		{"no token", "orders/7", 0, fence.ErrNoToken},
		{"empty scope", "", 42, fence.ErrInvalidScope},
		{"empty scope and no token", "", 0, fence.ErrInvalidScope},
	}
	forEachGuard(t, func(t *testing.T, gc guardCase) {
		ctx := context.Background()
		var rec recorder
		g := gc.open(t, &rec)
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				called := false
				err := g.Do(ctx, tt.scope, tt.token, func(context.Context) error { called = true; return nil })
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Do(%q, %d) = %v, want %v", tt.scope, tt.token, err, tt.wantErr)
				}
				if called {
					t.Error("apply was called")
				}
				if tt.scope != "" {
					if h, err := g.Highest(ctx, tt.scope); err != nil || h != 0 {
						t.Errorf("Highest = %d, %v; want 0, nil", h, err)
					}
				}
			})
		}
		if _, err := g.Highest(ctx, ""); !errors.Is(err, fence.ErrInvalidScope) {
			t.Errorf("Highest(\"\") error = %v, want ErrInvalidScope", err)
		}
		if d := rec.get(); len(d) != 0 {
			t.Errorf("observer saw %v for invalid input", d)
		}
	})
}

func TestGuardSequence(t *testing.T) {
	t.Parallel()
	type step struct {
		token  uint64
		accept bool
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"increasing", []step{{1, true}, {2, true}, {40, true}}},
		{"equal tokens accepted", []step{{7, true}, {7, true}, {7, true}}},
		{"lower rejected", []step{{42, true}, {41, false}, {1, false}, {42, true}}},
		{"higher after rejection", []step{{10, true}, {9, false}, {11, true}, {10, false}}},
		{"max uint64", []step{{^uint64(0), true}, {^uint64(0) - 1, false}, {^uint64(0), true}}},
	}
	forEachGuard(t, func(t *testing.T, gc guardCase) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				ctx := context.Background()
				var rec recorder
				g := gc.open(t, &rec)
				const scope = "orders/7"
				var highest uint64
				var want []fence.Decision
				for i, s := range tt.steps {
					called := false
					err := g.Do(ctx, scope, s.token, func(context.Context) error { called = true; return nil })
					want = append(want, fence.Decision{Scope: scope, Presented: s.token, Highest: highest, Accepted: s.accept})
					if s.accept {
						if err != nil || !called {
							t.Fatalf("step %d: Do(%d) = %v, called %v; want accepted", i, s.token, err, called)
						}
						highest = max(highest, s.token)
					} else {
						var stale *fence.StaleTokenError
						if !errors.As(err, &stale) || !errors.Is(err, fence.ErrStaleToken) {
							t.Fatalf("step %d: Do(%d) = %v, want *StaleTokenError", i, s.token, err)
						}
						if got := (fence.StaleTokenError{Scope: scope, Presented: s.token, Highest: highest}); *stale != got {
							t.Errorf("step %d: rejection %+v, want %+v", i, *stale, got)
						}
						if called {
							t.Errorf("step %d: apply called for a stale token", i)
						}
					}
					if h, err := g.Highest(ctx, scope); err != nil || h != highest {
						t.Fatalf("step %d: Highest = %d, %v; want %d", i, h, err, highest)
					}
				}
				if got := rec.get(); fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("observed %v\nwant     %v", got, want)
				}
			})
		}
	})
}

func TestGuardApplyErrorKeepsHighest(t *testing.T) {
	t.Parallel()
	forEachGuard(t, func(t *testing.T, gc guardCase) {
		ctx := context.Background()
		var rec recorder
		g := gc.open(t, &rec)
		const scope = "jobs/1"
		if err := g.Do(ctx, scope, 5, func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
		boom := errors.New("disk full")
		err := g.Do(ctx, scope, 9, func(context.Context) error { return boom })
		if !errors.Is(err, boom) {
			t.Fatalf("Do = %v, want the apply error", err)
		}
		if h, _ := g.Highest(ctx, scope); h != 5 {
			t.Fatalf("Highest after failed apply = %d, want 5", h)
		}
		// The failed token was not recorded, so a token between 5 and 9 is
		// still good.
		if err := g.Do(ctx, scope, 6, func(context.Context) error { return nil }); err != nil {
			t.Fatalf("Do(6) after failed Do(9) = %v", err)
		}
		if n := len(rec.get()); n != 2 {
			t.Errorf("observer saw %d decisions, want 2 (the failed apply is not one)", n)
		}
	})
}

func TestGuardScopesIndependent(t *testing.T) {
	t.Parallel()
	forEachGuard(t, func(t *testing.T, gc guardCase) {
		ctx := context.Background()
		g := gc.open(t, nil)
		nop := func(context.Context) error { return nil }
		if err := g.Do(ctx, "a", 100, nop); err != nil {
			t.Fatal(err)
		}
		if err := g.Do(ctx, "b", 1, nop); err != nil {
			t.Fatalf("token 1 for scope b after 100 for a: %v", err)
		}
		for scope, want := range map[string]uint64{"a": 100, "b": 1, "c": 0} {
			if h, err := g.Highest(ctx, scope); err != nil || h != want {
				t.Errorf("Highest(%q) = %d, %v; want %d", scope, h, err, want)
			}
		}
	})
}

func TestGuardContext(t *testing.T) {
	t.Parallel()
	forEachGuard(t, func(t *testing.T, gc guardCase) {
		g := gc.open(t, nil)
		nop := func(context.Context) error { return nil }

		cancelled, cancel := context.WithCancel(context.Background())
		cancel()
		called := false
		if err := g.Do(cancelled, "a", 1, func(context.Context) error { called = true; return nil }); !errors.Is(err, context.Canceled) || called {
			t.Errorf("Do with cancelled ctx = %v, called %v", err, called)
		}

		// Hold scope "a" with an apply that waits for us.
		entered, release := make(chan struct{}), make(chan struct{})
		held := make(chan error, 1)
		go func() {
			held <- g.Do(context.Background(), "a", 2, func(context.Context) error {
				close(entered)
				<-release
				return nil
			})
		}()
		<-entered

		// Another scope is not held up by "a".
		if err := g.Do(context.Background(), "b", 1, nop); err != nil {
			t.Errorf("Do on another scope while a is held: %v", err)
		}
		// A waiter for "a" gives up when its ctx ends; "a" stays held until
		// release, so only the deadline can end this call.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		called = false
		if err := g.Do(ctx, "a", 3, func(context.Context) error { called = true; return nil }); !errors.Is(err, context.DeadlineExceeded) || called {
			t.Errorf("waiting Do = %v, called %v; want DeadlineExceeded", err, called)
		}
		close(release)
		if err := <-held; err != nil {
			t.Fatal(err)
		}
		if h, _ := g.Highest(context.Background(), "a"); h != 2 {
			t.Errorf("Highest(a) = %d, want 2", h)
		}
	})
}

func TestGuardObserverOutsideLock(t *testing.T) {
	t.Parallel()
	forEachGuard(t, func(t *testing.T, gc guardCase) {
		var g fence.Guard
		var reentered atomic.Bool
		var inner error
		obs := fence.ObserverFunc(func(ctx context.Context, d fence.Decision) {
			if reentered.Swap(true) {
				return
			}
			// If the guard still held the scope, this would wait until the
			// deadline.
			ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			inner = g.Do(ctx, d.Scope, d.Presented, func(context.Context) error { return nil })
		})
		g = gc.open(t, obs)
		if err := g.Do(context.Background(), "a", 1, func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if inner != nil {
			t.Errorf("Do from the observer: %v", inner)
		}
	})
}

// TestGuardConcurrent has many goroutines present interleaved tokens, some
// of them stale by the time they arrive, to a few scopes. It records what
// each apply saw and checks the guard rule against that history.
func TestGuardConcurrent(t *testing.T) {
	t.Parallel()
	forEachGuard(t, func(t *testing.T, gc guardCase) {
		t.Parallel()
		const (
			workers = 16
			nscopes = 3
		)
		ctx := context.Background()
		var rejected atomic.Int64
		obs := fence.ObserverFunc(func(_ context.Context, d fence.Decision) {
			if !d.Accepted {
				rejected.Add(1)
			}
		})
		g := gc.open(t, obs)

		type scopeState struct {
			issued   atomic.Uint64 // the "lease service": next token per scope
			inApply  atomic.Int32
			mu       sync.Mutex
			accepted []uint64 // in apply order
		}
		scopes := make([]*scopeState, nscopes)
		for i := range scopes {
			scopes[i] = new(scopeState)
		}
		type rejection struct {
			scope int
			err   fence.StaleTokenError
		}
		var (
			mu         sync.Mutex
			rejections []rejection
			wg         sync.WaitGroup
		)
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(w), 1))
				for range gc.ops {
					si := rng.IntN(nscopes)
					s := scopes[si]
					// Take a fresh token, or one a few generations old, as a
					// holder that paused would present.
					token := s.issued.Add(1)
					if lag := uint64(rng.IntN(4)); lag < token {
						token -= lag
					}
					scope := fmt.Sprintf("scope-%d", si)
					err := g.Do(ctx, scope, token, func(context.Context) error {
						if n := s.inApply.Add(1); n != 1 {
							t.Errorf("%s: %d applies at once", scope, n)
						}
						s.mu.Lock()
						s.accepted = append(s.accepted, token)
						s.mu.Unlock()
						s.inApply.Add(-1)
						return nil
					})
					var stale *fence.StaleTokenError
					switch {
					case err == nil:
					case errors.As(err, &stale):
						if stale.Scope != scope || stale.Presented != token || stale.Highest <= token {
							t.Errorf("rejection %+v for %s token %d", *stale, scope, token)
						}
						mu.Lock()
						rejections = append(rejections, rejection{si, *stale})
						mu.Unlock()
					default:
						t.Errorf("Do(%s, %d): %v", scope, token, err)
					}
				}
			}()
		}
		wg.Wait()

		total := 0
		for si, s := range scopes {
			scope := fmt.Sprintf("scope-%d", si)
			seen := make(map[uint64]bool)
			var highest uint64
			for i, tok := range s.accepted {
				if tok < highest {
					t.Fatalf("%s: accepted %d after %d (recent history %v)", scope, tok, highest, s.accepted[max(0, i-10):i+1])
				}
				highest = tok
				seen[tok] = true
			}
			if h, err := g.Highest(ctx, scope); err != nil || h != highest {
				t.Errorf("%s: Highest = %d, %v; want %d, the last accepted", scope, h, err, highest)
			}
			for _, r := range rejections {
				if r.scope == si && !seen[r.err.Highest] {
					t.Errorf("%s: rejection names highest %d, which was never accepted", scope, r.err.Highest)
				}
			}
			total += len(s.accepted)
		}
		if total+len(rejections) != workers*gc.ops {
			t.Errorf("%d accepted + %d rejected != %d calls", total, len(rejections), workers*gc.ops)
		}
		if int(rejected.Load()) != len(rejections) {
			t.Errorf("observer saw %d rejections, callers %d", rejected.Load(), len(rejections))
		}
		if len(rejections) == 0 {
			t.Error("no rejections: the test did not interleave")
		}
		t.Logf("%d accepted, %d rejected", total, len(rejections))
	})
}
