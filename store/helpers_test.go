package store_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencedio/fenced/fence/fencehttp"
	"github.com/fencedio/fenced/store"
)

// newStore opens a store on a fresh directory with a private registry and a
// silent logger unless cfg sets them.
func newStore(t *testing.T, cfg store.Config) *store.Store {
	t.Helper()
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.NewRegistry()
	}
	s, err := store.Open(cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// env is a store served by an httptest server.
type env struct {
	t   *testing.T
	s   *store.Store
	srv *httptest.Server
}

func newEnv(t *testing.T, cfg store.Config) *env {
	t.Helper()
	s := newStore(t, cfg)
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return &env{t: t, s: s, srv: srv}
}

// reply is a fully read response.
type reply struct {
	status int
	header http.Header
	body   []byte
}

func (r reply) problem(t *testing.T) map[string]any {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type = %q, want application/problem+json (status %d, body %s)", ct, r.status, r.body)
	}
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("problem body %q: %v", r.body, err)
	}
	if got := m["status"]; got != float64(r.status) {
		t.Errorf("problem status member = %v, want %d", got, r.status)
	}
	return m
}

// fencing returns the two fencing headers; an empty token or scope argument
// still sets the header (to the empty string) unless omitted with nil.
func fencing(scope, token string) http.Header {
	h := http.Header{}
	h[fencehttp.HeaderScope] = []string{scope}
	h[fencehttp.HeaderToken] = []string{token}
	return h
}

func tok(n uint64) string { return strconv.FormatUint(n, 10) }

// do sends a request over the loopback server.
func (e *env) do(method, path string, h http.Header, body []byte) reply {
	e.t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, e.srv.URL+path, rd)
	if err != nil {
		e.t.Fatalf("NewRequest %s %s: %v", method, path, err)
	}
	for k, v := range h {
		req.Header[k] = v
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: b}
}

// serve calls the handler directly, so that header values reach it exactly
// as given (the HTTP/1.1 parser trims surrounding whitespace on the wire).
func (e *env) serve(method, path string, h http.Header, body []byte) reply {
	e.t.Helper()
	req := httptest.NewRequest(method, path, bytes.NewReader(body))
	for k, v := range h {
		req.Header[k] = v
	}
	rec := httptest.NewRecorder()
	e.s.Handler().ServeHTTP(rec, req)
	return reply{status: rec.Code, header: rec.Result().Header, body: rec.Body.Bytes()}
}

func (e *env) put(name, scope string, token uint64, value string) reply {
	e.t.Helper()
	return e.do(http.MethodPut, "/v1/objects/"+name, fencing(scope, tok(token)), []byte(value))
}

func (e *env) del(name, scope string, token uint64) reply {
	e.t.Helper()
	return e.do(http.MethodDelete, "/v1/objects/"+name, fencing(scope, tok(token)), nil)
}

func (e *env) get(name string) reply {
	e.t.Helper()
	return e.do(http.MethodGet, "/v1/objects/"+name, nil, nil)
}

func mustStatus(t *testing.T, what string, r reply, want int) {
	t.Helper()
	if r.status != want {
		t.Fatalf("%s: status %d, want %d; body %s", what, r.status, want, r.body)
	}
}

func (e *env) audit() []store.AuditRecord {
	e.t.Helper()
	recs, err := e.s.Audit(context.Background())
	if err != nil {
		e.t.Fatalf("Audit: %v", err)
	}
	return recs
}

// wantObject checks that GET name answers value written with token.
func (e *env) wantObject(name, scope string, token uint64, value string) {
	e.t.Helper()
	r := e.get(name)
	mustStatus(e.t, "GET "+name, r, http.StatusOK)
	if string(r.body) != value {
		e.t.Errorf("GET %s = %q, want %q", name, r.body, value)
	}
	if got := r.header.Get(fencehttp.HeaderToken); got != tok(token) {
		e.t.Errorf("GET %s %s = %q, want %d", name, fencehttp.HeaderToken, got, token)
	}
	if got := r.header.Get(fencehttp.HeaderScope); got != scope {
		e.t.Errorf("GET %s %s = %q, want %q", name, fencehttp.HeaderScope, got, scope)
	}
}

func (e *env) highest(scope string) uint64 {
	e.t.Helper()
	h, err := e.s.Highest(context.Background(), scope)
	if err != nil {
		e.t.Fatalf("Highest(%q): %v", scope, err)
	}
	return h
}
