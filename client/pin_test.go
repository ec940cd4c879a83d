package client_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/internal/fencedtest"
)

// lockedBuffer collects log lines written from any goroutine.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestClusterPinned checks that a client whose endpoints span two clusters
// keeps to the cluster of its first answer: once that cluster's node is
// gone, calls fail instead of answering with the other cluster's leases
// and tokens, and the other endpoint is logged once.
func TestClusterPinned(t *testing.T) {
	t.Parallel()
	a, b := fencedtest.Start(t), fencedtest.Start(t)
	idA, idB := a.Role().ClusterID, b.Role().ClusterID
	if idA == "" || idB == "" || idA == idB {
		t.Fatalf("cluster IDs %q and %q: want two different ones", idA, idB)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// On b the key is held, and its tokens run far ahead.
	other := b.Client(t, client.Config{Owner: "b"})
	defer other.Close()
	for range 5 {
		l, err := other.Acquire(ctx, "pin/k")
		if err != nil {
			t.Fatal(err)
		}
		l.Orphan()
		if err := other.Release(ctx, "pin/k", l.ID()); err != nil {
			t.Fatal(err)
		}
	}
	held, err := other.Acquire(ctx, "pin/k")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(context.Background())

	var logs lockedBuffer
	c, err := client.New(client.Config{Endpoints: []string{a.URL, b.URL}, FailoverTimeout: 300 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.Acquire(ctx, "pin/k")
	if err != nil {
		t.Fatalf("first acquire, at a: %v", err)
	}
	first := l.Token()
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		got, err := c.Get(ctx, "pin/k")
		if err == nil {
			t.Fatalf("get %d with a gone: answered by the other cluster: %+v, last token %d (a's was %d)", i, got.Lease, got.LastToken, first)
		}
		if !errors.Is(err, client.ErrUnavailable) {
			t.Fatalf("get %d with a gone: %v, want ErrUnavailable", i, err)
		}
		if _, err := c.Acquire(ctx, "pin/other"); err == nil || !errors.Is(err, client.ErrUnavailable) ||
			errors.Is(err, client.ErrAcquireUncertain) {
			t.Fatalf("acquire %d with a gone: %v, want ErrUnavailable", i, err)
		}
	}
	out := logs.String()
	if n := strings.Count(out, "level=ERROR"); n != 1 {
		t.Errorf("logged %d times, want once for %s:\n%s", n, b.URL, out)
	}
	for _, want := range []string{b.URL, idA, idB} {
		if !strings.Contains(out, want) {
			t.Errorf("the log does not name %s:\n%s", want, out)
		}
	}
}

// TestClusterPinnedUpFront checks Config.ClusterID: an endpoint of another
// cluster is never used, by unary calls or streams, and a call that finds
// no other fails with *ClusterMismatchError. An Acquire it answered is not
// reported as granted (the other cluster did grant it, for itself).
func TestClusterPinnedUpFront(t *testing.T) {
	t.Parallel()
	a, b := fencedtest.Start(t), fencedtest.Start(t)
	idA, idB := a.Role().ClusterID, b.Role().ClusterID
	c, err := client.New(client.Config{Endpoint: b.URL, ClusterID: strings.ToUpper(idA),
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	want := client.ClusterMismatchError{Endpoint: b.URL, Pinned: idA, Got: idB}
	check := func(what string, err error) {
		t.Helper()
		var ce *client.ClusterMismatchError
		if !errors.As(err, &ce) || *ce != want || !errors.Is(err, client.ErrClusterMismatch) {
			t.Errorf("%s: %v, want %v", what, err, &want)
		}
	}
	l, err := c.Acquire(ctx, "pin/k")
	if l != nil {
		t.Fatalf("acquire at another cluster returned a lease: %v", l.Token())
	}
	check("acquire", err)
	if errors.Is(err, client.ErrAcquireUncertain) {
		t.Errorf("acquire at another cluster reported as uncertain: %v", err)
	}
	_, err = c.Get(ctx, "pin/k")
	check("get", err)
	// After revision 1: b replays the acquisition above, and sends its
	// headers with it (a stream's answer starts with its first message).
	err = c.Watch(ctx, "pin/", 1, func(e client.Event) error {
		t.Errorf("watch delivered an event of another cluster: %+v", e)
		return nil
	})
	check("watch", err)

	// A server that sends no cluster ID (older than the header) is accepted.
	old := httptest.NewServer(&httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(mustURL(t, b.URL)) },
		ModifyResponse: func(r *http.Response) error {
			r.Header.Del(client.ClusterIDHeader)
			return nil
		},
	})
	defer old.Close()
	c2, err := client.New(client.Config{Endpoint: old.URL, ClusterID: idA})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if got, err := c2.Get(ctx, "pin/k"); err != nil || got.Lease == nil {
		t.Errorf("get from a server without cluster IDs: %+v, %v; want held", got, err)
	}

	if err := (client.Config{ClusterID: "not hex"}).Validate(); err == nil {
		t.Error("a ClusterID that is not hex was accepted")
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
