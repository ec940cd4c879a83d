package fence_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencebolt"
)

// ownedLease is a fence.Lease that knows its owner.
type ownedLease struct {
	testLease
	owner string
}

func (l *ownedLease) Owner() string { return l.owner }

// decisions records what an observer is told.
type decisions struct {
	mu  sync.Mutex
	all []fence.Decision
}

func (r *decisions) Observe(_ context.Context, d fence.Decision) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.all = append(r.all, d)
}

func (r *decisions) list() []fence.Decision {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]fence.Decision(nil), r.all...)
}

func TestLeaseOwnerReachesObserver(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, name := range []string{"memory", "bolt"} {
		t.Run(name, func(t *testing.T) {
			rec := &decisions{}
			var g fence.Guard = fence.NewMemory(fence.MemoryConfig{Observer: rec})
			if name == "bolt" {
				b, err := fencebolt.Open(filepath.Join(t.TempDir(), "g.db"), fencebolt.Config{Observer: rec})
				if err != nil {
					t.Fatal(err)
				}
				defer b.Close()
				g = b
			}
			b := &ownedLease{testLease: testLease{key: "jobs/1", token: 64}, owner: "worker-B"}
			a := &ownedLease{testLease: testLease{key: "jobs/1", token: 63}, owner: "worker-A"}
			anon := &testLease{key: "jobs/1", token: 64}
			if err := fence.DoLease(ctx, g, b, nop); err != nil {
				t.Fatal(err)
			}
			if err := fence.DoLease(ctx, g, a, nop); !errors.Is(err, fence.ErrStaleToken) {
				t.Fatalf("stale lease: %v", err)
			}
			if err := fence.DoLease(ctx, g, anon, nop); err != nil {
				t.Fatal(err)
			}
			got := rec.list()
			want := []fence.Decision{
				{Scope: "jobs/1", Presented: 64, Highest: 0, Accepted: true, Owner: "worker-B"},
				{Scope: "jobs/1", Presented: 63, Highest: 64, Accepted: false, Owner: "worker-A"},
				{Scope: "jobs/1", Presented: 64, Highest: 64, Accepted: true},
			}
			if len(got) != len(want) {
				t.Fatalf("decisions %+v, want %+v", got, want)
			}
			for i := range want {
				if got[i] != want[i] {
					t.Errorf("decision %d = %+v, want %+v", i, got[i], want[i])
				}
			}
		})
	}
}

func TestWithOwnerDropsInvalidOwners(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, bad := range []string{"a\x00b", "tab\there", strings.Repeat("x", fence.MaxOwnerBytes+1), "\xff"} {
		if got := fence.OwnerFromContext(fence.WithOwner(ctx, bad)); got != "" {
			t.Errorf("WithOwner(%q) carried %q", bad, got)
		}
	}
	ok := strings.Repeat("é", fence.MaxOwnerBytes/2)
	if got := fence.OwnerFromContext(fence.WithOwner(ctx, ok)); got != ok {
		t.Errorf("valid owner of %d bytes not carried: %q", len(ok), got)
	}
}

func TestSlogObserverLogsOwner(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	obs := fence.NewSlogObserver(slog.New(slog.NewTextHandler(&buf, nil)))
	g := fence.NewMemory(fence.MemoryConfig{Observer: obs})
	ctx := context.Background()
	_ = fence.DoLease(ctx, g, &ownedLease{testLease: testLease{key: "s", token: 64}, owner: "worker-B"}, nop)
	_ = fence.DoLease(ctx, g, &ownedLease{testLease: testLease{key: "s", token: 63}, owner: "worker-A"}, nop)
	_ = g.Do(ctx, "s", 62, nop)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("want 2 warnings (debug is off), got %q", lines)
	}
	if want := "scope=s presented_token=63 highest_token=64 owner=worker-A rejections=1"; !strings.Contains(lines[0], want) {
		t.Errorf("first rejection %q lacks %q", lines[0], want)
	}
	if strings.Contains(lines[1], "owner=") || !strings.Contains(lines[1], "rejections=2") {
		t.Errorf("anonymous rejection %q", lines[1])
	}
}
