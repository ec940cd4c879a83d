package fencehttp_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencehttp"
)

type ownedLease struct {
	fakeLease
	owner string
}

func (l *ownedLease) Owner() string { return l.owner }

// TestOwnerTravelsWithToken sends writes through Transport to Middleware
// and checks that the guard's observer sees the owner of each lease.
func TestOwnerTravelsWithToken(t *testing.T) {
	t.Parallel()
	var (
		mu   sync.Mutex
		seen []fence.Decision
	)
	obs := fence.ObserverFunc(func(_ context.Context, d fence.Decision) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, d)
	})
	g := fence.NewMemory(fence.MemoryConfig{Observer: obs})
	srv := httptest.NewServer(fencehttp.Middleware(g, fencehttp.Config{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})))
	defer srv.Close()

	put := func(l fence.Lease, hdr string) int {
		t.Helper()
		c := &http.Client{Transport: fencehttp.NewTransport(l, srv.Client().Transport)}
		req, _ := http.NewRequest(http.MethodPut, srv.URL, strings.NewReader("x"))
		if hdr != "" {
			req.Header.Set(fencehttp.HeaderOwner, hdr) // replaced by the transport
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := put(&ownedLease{fakeLease: fakeLease{key: "jobs/1", token: 64}, owner: "worker-B"}, ""); got != http.StatusNoContent {
		t.Fatalf("fresh write: %d", got)
	}
	if got := put(&ownedLease{fakeLease: fakeLease{key: "jobs/1", token: 63}, owner: "worker-A"}, "forged"); got != http.StatusConflict {
		t.Fatalf("stale write: %d", got)
	}
	// A lease that does not know its owner sends none, whatever the caller set.
	if got := put(&fakeLease{key: "jobs/1", token: 62}, "forged"); got != http.StatusConflict {
		t.Fatalf("stale anonymous write: %d", got)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"worker-B", "worker-A", ""}
	if len(seen) != len(want) {
		t.Fatalf("decisions %+v", seen)
	}
	for i, w := range want {
		if seen[i].Owner != w {
			t.Errorf("decision %d owner %q, want %q", i, seen[i].Owner, w)
		}
	}
}

func TestOwnerFromHeader(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		values []string
		want   string
	}{
		{nil, ""},
		{[]string{"worker-A"}, "worker-A"},
		{[]string{"a", "b"}, ""},
		{[]string{"bad\x01"}, ""},
		{[]string{strings.Repeat("o", fence.MaxOwnerBytes+1)}, ""},
	} {
		h := http.Header{fencehttp.HeaderOwner: tc.values}
		if got := fencehttp.OwnerFromHeader(h); got != tc.want {
			t.Errorf("OwnerFromHeader(%q) = %q, want %q", tc.values, got, tc.want)
		}
	}
}
