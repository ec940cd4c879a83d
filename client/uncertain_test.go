package client_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/internal/fencedtest"
)

// dropFirstAcquireAnswer starts a proxy in front of target that forwards
// every call, but cuts the connection instead of returning the answer to
// the first Acquire, after the server has answered it: the grant is
// written, and the caller never sees it, as when a leader dies between
// commit and answer.
func dropFirstAcquireAnswer(t *testing.T, target string) (proxyURL string, dropped *atomic.Bool) {
	return cutFirstAnswer(t, target, "/Acquire", false)
}

// cutFirstAcquireAnswer is dropFirstAcquireAnswer; with reset, the
// connection is cut with a TCP reset (as when the node's process dies),
// which connect-go reports as canceled.
func cutFirstAcquireAnswer(t *testing.T, target string, reset bool) (proxyURL string, dropped *atomic.Bool) {
	return cutFirstAnswer(t, target, "/Acquire", reset)
}

// cutFirstAnswer is cutFirstAcquireAnswer for the first call whose path
// ends with method ("/Acquire", "/Release").
func cutFirstAnswer(t *testing.T, target, method string, reset bool) (proxyURL string, dropped *atomic.Bool) {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	dropped = new(atomic.Bool)
	ps := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, method) || !dropped.CompareAndSwap(false, true) {
			rp.ServeHTTP(w, r)
			return
		}
		out := r.Clone(r.Context())
		out.RequestURI = ""
		out.URL.Scheme, out.URL.Host = u.Scheme, u.Host
		resp, err := http.DefaultTransport.RoundTrip(out)
		if err != nil {
			t.Errorf("proxy: %v", err)
		} else {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		if reset {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Errorf("proxy: %v", err)
				return
			}
			conn.(*net.TCPConn).SetLinger(0)
			conn.Close() // a reset, without an answer
			return
		}
		panic(http.ErrAbortHandler) // closes the connection without an answer
	}))
	t.Cleanup(ps.Close)
	return ps.URL, dropped
}

// roleless puts target behind a proxy that does not answer /v1/role, as a
// plain load balancer would not. With it as the second endpoint, the
// client's search for the leader can pick only the first one, so the first
// attempt goes through that (otherwise, on a loaded machine, the search may
// find the direct endpoint first and the cutting proxy sees no Acquire).
func roleless(t *testing.T, target string) string {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	ps := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/role" {
			http.NotFound(w, r)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(ps.Close)
	return ps.URL
}

// TestAcquireCutByFailoverIsUncertain: an Acquire whose first attempt was
// granted but not answered is retried on the next endpoint, which finds the
// key held by the caller's own owner. That is not "held by another": the
// caller may hold the key, so Acquire reports ErrAcquireUncertain.
// Before ErrAcquireUncertain existed this returned a *HeldError naming the
// caller itself.
func TestAcquireCutByFailoverIsUncertain(t *testing.T) {
	t.Parallel()
	srv := fencedtest.Start(t)
	proxy, dropped := dropFirstAcquireAnswer(t, srv.URL)
	c, err := client.New(client.Config{Endpoints: []string{proxy, roleless(t, srv.URL)}, Owner: "me", TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := c.Acquire(ctx, "cut/a")
	if err == nil {
		t.Fatalf("acquire returned a lease (token %d) although its grant's answer was dropped", l.Token())
	}
	if !dropped.Load() {
		t.Fatal("the proxy dropped no answer")
	}
	if errors.Is(err, client.ErrHeld) {
		t.Fatalf("acquire: %v; it must not say held by another", err)
	}
	var ue *client.UncertainError
	if !errors.Is(err, client.ErrAcquireUncertain) || !errors.As(err, &ue) {
		t.Fatalf("acquire: %v, want ErrAcquireUncertain", err)
	}
	if ue.Key != "cut/a" || ue.Owner != "me" || ue.Remaining <= 0 || ue.Remaining > 5*time.Second || ue.Attempt == nil {
		t.Errorf("uncertain error %+v", ue)
	}
	// The unanswered attempt was indeed granted.
	got, err := c.Get(ctx, "cut/a")
	if err != nil || got.Lease == nil || got.Lease.Owner != "me" {
		t.Fatalf("get: %+v %v, want held by me", got, err)
	}
}

// TestAcquireHeldAfterRefusedConnection: a first endpoint that refuses the
// connection received nothing, so a key found held by the same owner is
// held by someone else with that owner string: a *HeldError.
func TestAcquireHeldAfterRefusedConnection(t *testing.T) {
	t.Parallel()
	srv := fencedtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	first := srv.Client(t, client.Config{Owner: "me"})
	l, err := first.Acquire(ctx, "cut/b")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	c, err := client.New(client.Config{Endpoints: []string{deadURL(t), srv.URL}, Owner: "me"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Acquire(ctx, "cut/b")
	var held *client.HeldError
	if !errors.As(err, &held) || held.Owner != "me" || errors.Is(err, client.ErrAcquireUncertain) {
		t.Fatalf("acquire: %v, want a *HeldError naming me", err)
	}
}

// TestAcquireCutByResetIsUncertain: a connection reset while an Acquire
// waits for its answer (the node died after granting) is reported by
// connect-go as canceled, though the caller cancelled nothing. The client
// takes it for unavailable: it retries on the next endpoint, which finds
// the key held by this owner, so the outcome is uncertain.
func TestAcquireCutByResetIsUncertain(t *testing.T) {
	t.Parallel()
	srv := fencedtest.Start(t)
	proxy, dropped := cutFirstAcquireAnswer(t, srv.URL, true)
	c, err := client.New(client.Config{Endpoints: []string{proxy, roleless(t, srv.URL)}, Owner: "me", TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = c.Acquire(ctx, "reset/a")
	if !dropped.Load() {
		t.Fatal("the proxy cut no answer")
	}
	if !errors.Is(err, client.ErrAcquireUncertain) || errors.Is(err, context.Canceled) {
		t.Fatalf("acquire: %v, want ErrAcquireUncertain", err)
	}
}

// TestResetIsUnavailable: with one endpoint, a reset connection is
// reported as unavailable, which the caller may retry, not as canceled,
// which only the caller's own context causes.
func TestResetIsUnavailable(t *testing.T) {
	t.Parallel()
	srv := fencedtest.Start(t)
	proxy, _ := cutFirstAcquireAnswer(t, srv.URL, true)
	c, err := client.New(client.Config{Endpoint: proxy, Owner: "me", TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = c.Acquire(ctx, "reset/b")
	if !errors.Is(err, client.ErrUnavailable) || errors.Is(err, context.Canceled) || connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("acquire through a reset connection: %v (code %v), want unavailable", err, connect.CodeOf(err))
	}
}

// TestReleaseCutByFailoverIsDone: a Release applied by the server whose
// answer was lost is retried on the next endpoint, which answers not_found.
// The lease is gone (released by the first attempt, or expired), which is
// what the caller asked for: Release returns nil, not ErrNotHeld. Before
// releaseGone, Release reported ErrNotHeld as if the lease had not been
// held.
func TestReleaseCutByFailoverIsDone(t *testing.T) {
	t.Parallel()
	srv := fencedtest.Start(t)
	proxy, dropped := cutFirstAnswer(t, srv.URL, "/Release", false)
	c, err := client.New(client.Config{Endpoints: []string{proxy, roleless(t, srv.URL)}, Owner: "me", TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := c.Acquire(ctx, "cut/release")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("release whose answer was lost: %v, want nil (released or expired)", err)
	}
	if !dropped.Load() {
		t.Fatal("the proxy dropped no answer")
	}
	if !errors.Is(l.Err(), client.ErrReleased) {
		t.Errorf("lease cause %v, want ErrReleased", l.Err())
	}
	if got, err := c.Get(ctx, "cut/release"); err != nil || got.Lease != nil {
		t.Fatalf("get after release: %+v err=%v, want free", got, err)
	}
	// A Release that reached the server and found the lease gone is still
	// ErrNotHeld: the answer was seen, not lost.
	if err := c.Release(ctx, l.Key(), l.ID()); !errors.Is(err, client.ErrNotHeld) {
		t.Fatalf("second release: %v, want ErrNotHeld", err)
	}
}
