package fencehttp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencehttp"
)

// fakeLease records what the transport tells it.
type fakeLease struct {
	key   string
	token uint64

	mu   sync.Mutex
	lost []error
}

var _ fencehttp.Lease = (*fakeLease)(nil)

func (l *fakeLease) Key() string   { return l.key }
func (l *fakeLease) Token() uint64 { return l.token }
func (l *fakeLease) MarkLost(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lost = append(l.lost, err)
}

func (l *fakeLease) lostErrs() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]error(nil), l.lost...)
}

// hookGuard wraps a guard to inject failures around the real decision.
type hookGuard struct {
	fence.Guard
	before error                                     // returned without deciding
	after  error                                     // returned after a successful Do
	wrap   func(ctx context.Context) context.Context // applied to apply's ctx
}

func (g *hookGuard) Do(ctx context.Context, scope string, token uint64, apply func(context.Context) error) error {
	if g.before != nil {
		return g.before
	}
	err := g.Guard.Do(ctx, scope, token, func(ctx context.Context) error {
		if g.wrap != nil {
			ctx = g.wrap(ctx)
		}
		return apply(ctx)
	})
	if err == nil && g.after != nil {
		return g.after
	}
	return err
}

// seed records token for scope as if a mutation had been accepted.
func seed(t *testing.T, g fence.Guard, scope string, token uint64) {
	t.Helper()
	if err := g.Do(t.Context(), scope, token, func(context.Context) error { return nil }); err != nil {
		t.Fatalf("seed %q with %d: %v", scope, token, err)
	}
}

func highest(t *testing.T, g fence.Guard, scope string) uint64 {
	t.Helper()
	h, err := g.Highest(t.Context(), scope)
	if err != nil {
		t.Fatalf("Highest(%q): %v", scope, err)
	}
	return h
}

// fencedHeader builds request headers; an empty value is left out.
func fencedHeader(scope, token string) http.Header {
	h := http.Header{}
	if scope != "" {
		h.Set(fencehttp.HeaderScope, scope)
	}
	if token != "" {
		h.Set(fencehttp.HeaderToken, token)
	}
	return h
}

func send(t *testing.T, c *http.Client, method, url string, h http.Header, body string) (*http.Response, []byte) {
	t.Helper()
	resp, b, err := trySend(t.Context(), c, method, url, h, body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// trySend is send for goroutines other than the test's.
func trySend(ctx context.Context, c *http.Client, method, url string, h http.Header, body string) (*http.Response, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	for k, vs := range h {
		req.Header[k] = vs
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("%s %s: %w", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, nil, fmt.Errorf("%s %s: reading body: %w", method, url, err)
	}
	return resp, b, nil
}

// problemFields decodes a problem body keeping numbers as written.
func problemFields(t *testing.T, body []byte) map[string]any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("problem body %q: %v", body, err)
	}
	return m
}

// counter counts handler calls per scope; it is the "applied" side effect.
type counter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counter) inc(scope string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[scope]++
}

func (c *counter) get(scope string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[scope]
}
