package fencehttp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencehttp"
)

// countingHandler is the protected resource: it counts the calls that reach
// it per scope and answers with the status asked for in X-Status.
func countingHandler(c *counter) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.inc(r.Header.Get(fencehttp.HeaderScope))
		if s := r.Header.Get("X-Status"); s != "" {
			code, _ := strconv.Atoi(s)
			w.WriteHeader(code)
		}
		fmt.Fprint(w, "applied")
	})
}

func newFencedServer(t *testing.T, g fence.Guard) (*httptest.Server, *counter) {
	t.Helper()
	return newFencedServerWith(t, g, fencehttp.Config{})
}

func newFencedServerWith(t *testing.T, g fence.Guard, cfg fencehttp.Config) (*httptest.Server, *counter) {
	t.Helper()
	c := &counter{}
	srv := httptest.NewServer(fencehttp.Middleware(g, cfg)(countingHandler(c)))
	t.Cleanup(srv.Close)
	return srv, c
}

func TestMiddlewareSequence(t *testing.T) {
	t.Parallel()
	g := fence.NewMemory(fence.MemoryConfig{})
	srv, calls := newFencedServer(t, g)
	const scope = "orders/7"
	steps := []struct {
		method  string
		token   string
		status  int
		applied bool
		highest uint64
	}{
		{http.MethodPut, "42", http.StatusOK, true, 42},
		{http.MethodPut, "42", http.StatusOK, true, 42}, // equal token: the holder writes again
		{http.MethodPost, "43", http.StatusOK, true, 43},
		{http.MethodPatch, "41", http.StatusConflict, false, 43},
		{http.MethodDelete, "42", http.StatusConflict, false, 43},
		{http.MethodDelete, "43", http.StatusOK, true, 43},
		{"PROPPATCH", "40", http.StatusConflict, false, 43}, // extension methods are fenced too
		{http.MethodPut, "1000", http.StatusOK, true, 1000},
	}
	want := 0
	for i, s := range steps {
		resp, body := send(t, srv.Client(), s.method, srv.URL+"/x", fencedHeader(scope, s.token), "v")
		if resp.StatusCode != s.status {
			t.Fatalf("step %d: %s with %s = %d %s; want %d", i, s.method, s.token, resp.StatusCode, body, s.status)
		}
		if s.applied {
			want++
		}
		if got := calls.get(scope); got != want {
			t.Fatalf("step %d: handler called %d times; want %d", i, got, want)
		}
		if got := highest(t, g, scope); got != s.highest {
			t.Fatalf("step %d: highest = %d; want %d", i, got, s.highest)
		}
	}
}

func TestMiddlewareStaleAnswer(t *testing.T) {
	t.Parallel()
	g := fence.NewMemory(fence.MemoryConfig{})
	srv, calls := newFencedServer(t, g)
	const scope = "orders/7"
	seed(t, g, scope, 42)

	resp, body := send(t, srv.Client(), http.MethodPut, srv.URL+"/x", fencedHeader(scope, "41"), "late write")
	if resp.StatusCode != http.StatusConflict {
		t.Fatalf("status = %d; want 409", resp.StatusCode)
	}
	if ct := resp.Header.Get("Content-Type"); ct != fencehttp.ContentTypeProblem {
		t.Errorf("Content-Type = %q; want %q", ct, fencehttp.ContentTypeProblem)
	}
	got := problemFields(t, body)
	want := map[string]any{
		"type":           fencehttp.ProblemStaleToken,
		"title":          "Stale fencing token",
		"status":         json.Number("409"),
		"scope":          scope,
		"presentedToken": json.Number("41"),
		"highestToken":   json.Number("42"),
		"detail":         (&fence.StaleTokenError{Scope: scope, Presented: 41, Highest: 42}).Error(),
	}
	if len(got) != len(want) {
		t.Errorf("problem has members %v; want exactly %v", keys(got), keys(want))
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("problem[%q] = %#v; want %#v", k, got[k], v)
		}
	}
	if n := calls.get(scope); n != 0 {
		t.Errorf("handler called %d times for a stale token; want 0", n)
	}
	if h := highest(t, g, scope); h != 42 {
		t.Errorf("highest = %d after a stale write; want 42", h)
	}
}

func TestMiddlewareTokensAsJSONNumbersKeepFullRange(t *testing.T) {
	t.Parallel()
	g := fence.NewMemory(fence.MemoryConfig{})
	srv, _ := newFencedServer(t, g)
	const max = uint64(1<<64 - 1)
	seed(t, g, "big", max)
	resp, body := send(t, srv.Client(), http.MethodPut, srv.URL, fencedHeader("big", strconv.FormatUint(max-1, 10)), "")
	if resp.StatusCode != http.StatusConflict {
		t.Fatalf("status = %d; want 409", resp.StatusCode)
	}
	p, err := fencehttp.DecodeProblem(bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	stale, ok := p.Stale()
	if !ok || stale.Highest != max || stale.Presented != max-1 {
		t.Fatalf("decoded %+v, %v; want presented %d highest %d", stale, ok, max-1, max)
	}
}

func keys(m map[string]any) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func TestMiddlewareRejectsBadCredentials(t *testing.T) {
	t.Parallel()
	tooLong := strings.Repeat("s", fence.MaxScopeBytes+1)
	tests := []struct {
		name   string
		header http.Header
		status int
		ptype  string
	}{
		{"no headers", http.Header{}, http.StatusPreconditionRequired, fencehttp.ProblemMissingToken},
		{"scope without token", fencedHeader("s", ""), http.StatusPreconditionRequired, fencehttp.ProblemMissingToken},
		{"empty token", http.Header{"Fencing-Scope": {"s"}, "Fencing-Token": {""}}, http.StatusPreconditionRequired, fencehttp.ProblemMissingToken},
		{"token 0", fencedHeader("s", "0"), http.StatusBadRequest, fencehttp.ProblemInvalidToken},
		{"leading plus", fencedHeader("s", "+5"), http.StatusBadRequest, fencehttp.ProblemInvalidToken},
		{"leading zero", fencedHeader("s", "05"), http.StatusBadRequest, fencehttp.ProblemInvalidToken},
		{"negative", fencedHeader("s", "-5"), http.StatusBadRequest, fencehttp.ProblemInvalidToken},
		{"inner space", fencedHeader("s", "5 6"), http.StatusBadRequest, fencehttp.ProblemInvalidToken},
		{"leading space", fencedHeader("s", " 5"), http.StatusBadRequest, fencehttp.ProblemInvalidToken},
		{"trailing tab", fencedHeader("s", "5\t"), http.StatusBadRequest, fencehttp.ProblemInvalidToken},
		{"hex", fencedHeader("s", "0x5"), http.StatusBadRequest, fencehttp.ProblemInvalidToken},
		{"decimal point", fencedHeader("s", "5.0"), http.StatusBadRequest, fencehttp.ProblemInvalidToken},
		{"word", fencedHeader("s", "five"), http.StatusBadRequest, fencehttp.ProblemInvalidToken},
		{"overflow", fencedHeader("s", "18446744073709551616"), http.StatusBadRequest, fencehttp.ProblemInvalidToken},
		{"two tokens", http.Header{"Fencing-Scope": {"s"}, "Fencing-Token": {"5", "6"}}, http.StatusBadRequest, fencehttp.ProblemInvalidToken},
		{"token without scope", fencedHeader("", "5"), http.StatusBadRequest, fencehttp.ProblemInvalidScope},
		{"scope too long", fencedHeader(tooLong, "5"), http.StatusBadRequest, fencehttp.ProblemInvalidScope},
		{"scope with NUL", fencedHeader("a\x00b", "5"), http.StatusBadRequest, fencehttp.ProblemInvalidScope},
		{"scope with newline", fencedHeader("a\nb", "5"), http.StatusBadRequest, fencehttp.ProblemInvalidScope},
		{"scope with DEL", fencedHeader("a\x7fb", "5"), http.StatusBadRequest, fencehttp.ProblemInvalidScope},
		{"scope not UTF-8", fencedHeader("a\xffb", "5"), http.StatusBadRequest, fencehttp.ProblemInvalidScope},
		{"two scopes", http.Header{"Fencing-Scope": {"s", "t"}, "Fencing-Token": {"5"}}, http.StatusBadRequest, fencehttp.ProblemInvalidScope},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := fence.NewMemory(fence.MemoryConfig{})
			var calls atomic.Int32
			h := fencehttp.Middleware(g, fencehttp.Config{})(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { calls.Add(1) }))
			// Straight into the handler: several of these values cannot be
			// sent by net/http's client, but can arrive from other clients.
			req := httptest.NewRequest(http.MethodPut, "/x", strings.NewReader("v"))
			req.Header = tt.header
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)

			if rec.Code != tt.status {
				t.Fatalf("status = %d %s; want %d", rec.Code, rec.Body, tt.status)
			}
			if ct := rec.Header().Get("Content-Type"); ct != fencehttp.ContentTypeProblem {
				t.Errorf("Content-Type = %q; want %q", ct, fencehttp.ContentTypeProblem)
			}
			p, err := fencehttp.DecodeProblem(rec.Body)
			if err != nil {
				t.Fatal(err)
			}
			if p.Type != tt.ptype || p.Status != tt.status || p.Title == "" || p.Detail == "" {
				t.Errorf("problem = %+v; want type %q, status %d, a title and a detail", p, tt.ptype, tt.status)
			}
			if n := calls.Load(); n != 0 {
				t.Errorf("handler called %d times; want 0", n)
			}
			for _, s := range []string{"s", "a\x00b", tooLong} {
				if h, _ := g.Highest(t.Context(), s); h != 0 {
					t.Errorf("highest[%q] = %d; want 0", s, h)
				}
			}
		})
	}
}

// The rejections over a real connection, for what a Go client can send.
func TestMiddlewareRejectsOverHTTP(t *testing.T) {
	t.Parallel()
	g := fence.NewMemory(fence.MemoryConfig{})
	srv, calls := newFencedServer(t, g)
	for _, tt := range []struct {
		header http.Header
		status int
	}{
		{http.Header{}, http.StatusPreconditionRequired},
		{fencedHeader("s", "0"), http.StatusBadRequest},
		{fencedHeader("s", "+1"), http.StatusBadRequest},
		{fencedHeader("", "1"), http.StatusBadRequest},
	} {
		resp, body := send(t, srv.Client(), http.MethodPost, srv.URL, tt.header, "v")
		if resp.StatusCode != tt.status || resp.Header.Get("Content-Type") != fencehttp.ContentTypeProblem {
			t.Errorf("headers %v: %d %q %s; want %d problem+json", tt.header, resp.StatusCode, resp.Header.Get("Content-Type"), body, tt.status)
		}
	}
	if n := calls.get("s") + calls.get(""); n != 0 {
		t.Errorf("handler called %d times; want 0", n)
	}
}

func TestMiddlewareSafeMethodsPassThrough(t *testing.T) {
	t.Parallel()
	g := fence.NewMemory(fence.MemoryConfig{})
	srv, calls := newFencedServer(t, g)
	seed(t, g, "s", 10)
	for i, m := range []string{http.MethodGet, http.MethodHead, http.MethodOptions} {
		resp, _ := send(t, srv.Client(), m, srv.URL, nil, "")
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s without headers = %d; want 200", m, resp.StatusCode)
		}
		if n := calls.get(""); n != i+1 {
			t.Errorf("%s: handler called %d times in all; want %d", m, n, i+1)
		}
	}
	// A read is not checked, so a stale token neither fails it nor is recorded.
	resp, _ := send(t, srv.Client(), http.MethodGet, srv.URL, fencedHeader("s", "3"), "")
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET with a stale token = %d; want 200", resp.StatusCode)
	}
	resp, _ = send(t, srv.Client(), http.MethodGet, srv.URL, fencedHeader("s", "99"), "")
	if resp.StatusCode != http.StatusOK || highest(t, g, "s") != 10 {
		t.Errorf("GET with token 99 = %d, highest %d; want 200 and highest unchanged at 10", resp.StatusCode, highest(t, g, "s"))
	}
}

func TestMiddlewareFailedHandlerDoesNotRaiseHighest(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		cfg     fencehttp.Config
		status  int
		records bool
	}{
		{"500", fencehttp.Config{}, http.StatusInternalServerError, false},
		{"503", fencehttp.Config{}, http.StatusServiceUnavailable, false},
		{"404 records", fencehttp.Config{}, http.StatusNotFound, true},
		{"412 records", fencehttp.Config{}, http.StatusPreconditionFailed, true},
		{"201 records", fencehttp.Config{}, http.StatusCreated, true},
		{"custom: 422 fails", fencehttp.Config{FailedStatus: func(s int) bool { return s >= 400 }}, http.StatusUnprocessableEntity, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := fence.NewMemory(fence.MemoryConfig{})
			srv, calls := newFencedServerWith(t, g, tt.cfg)
			seed(t, g, "s", 10)
			h := fencedHeader("s", "50")
			h.Set("X-Status", strconv.Itoa(tt.status))
			resp, _ := send(t, srv.Client(), http.MethodPut, srv.URL, h, "v")
			if resp.StatusCode != tt.status {
				t.Fatalf("status = %d; want the handler's %d", resp.StatusCode, tt.status)
			}
			if calls.get("s") != 1 {
				t.Fatalf("handler called %d times; want 1", calls.get("s"))
			}
			want := uint64(10)
			if tt.records {
				want = 50
			}
			if got := highest(t, g, "s"); got != want {
				t.Fatalf("highest = %d; want %d", got, want)
			}
			// A token between the two is accepted exactly when 50 was not recorded.
			resp, _ = send(t, srv.Client(), http.MethodPut, srv.URL, fencedHeader("s", "45"), "v")
			wantStatus := http.StatusOK
			if tt.records {
				wantStatus = http.StatusConflict
			}
			if resp.StatusCode != wantStatus {
				t.Fatalf("follow-up with 45 = %d; want %d", resp.StatusCode, wantStatus)
			}
		})
	}
}

func TestMiddlewarePanicRecordsNothingAndPropagates(t *testing.T) {
	t.Parallel()
	g := fence.NewMemory(fence.MemoryConfig{})
	seed(t, g, "s", 10)
	boom := errors.New("boom")
	h := fencehttp.Middleware(g, fencehttp.Config{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK) // even after a success status, a panic is a failure
		panic(boom)
	}))
	func() {
		defer func() {
			if r := recover(); r != boom {
				t.Errorf("recovered %v; want the handler's panic value", r)
			}
		}()
		req := httptest.NewRequest(http.MethodPut, "/", nil)
		req.Header = fencedHeader("s", "20")
		h.ServeHTTP(httptest.NewRecorder(), req)
	}()
	if got := highest(t, g, "s"); got != 10 {
		t.Errorf("highest = %d after a panicking handler; want 10", got)
	}
	// The scope is not left locked.
	if err := g.Do(t.Context(), "s", 11, func(context.Context) error { return nil }); err != nil {
		t.Errorf("Do after the panic: %v", err)
	}
}

func TestMiddlewareScopeFunc(t *testing.T) {
	t.Parallel()
	g := fence.NewMemory(fence.MemoryConfig{})
	var calls atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("/objects/{name}", func(http.ResponseWriter, *http.Request) { calls.Add(1) })
	scopeOf := func(r *http.Request) (string, error) {
		name := r.PathValue("name")
		if name == "" {
			// The middleware runs outside the mux here, so read the path itself.
			name = strings.TrimPrefix(r.URL.Path, "/objects/")
		}
		if name == "forbidden" {
			return "", errors.New("no scope for this object")
		}
		return "objects/" + name, nil
	}
	srv := httptest.NewServer(fencehttp.Middleware(g, fencehttp.Config{ScopeFunc: scopeOf})(mux))
	t.Cleanup(srv.Close)

	// The header scope is ignored; the path decides.
	resp, _ := send(t, srv.Client(), http.MethodPut, srv.URL+"/objects/a", fencedHeader("ignored", "7"), "v")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT = %d; want 200", resp.StatusCode)
	}
	if highest(t, g, "objects/a") != 7 || highest(t, g, "ignored") != 0 {
		t.Fatalf("highest[objects/a] = %d, highest[ignored] = %d; want 7 and 0", highest(t, g, "objects/a"), highest(t, g, "ignored"))
	}
	resp, body := send(t, srv.Client(), http.MethodPut, srv.URL+"/objects/forbidden", fencedHeader("", "7"), "v")
	p, err := fencehttp.DecodeProblem(bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusBadRequest || p.Type != fencehttp.ProblemInvalidScope || !strings.Contains(p.Detail, "no scope for this object") {
		t.Fatalf("scope func error: %d %+v; want 400 invalid-scope with the error's text", resp.StatusCode, p)
	}
	// Missing token is still 428, before the scope function runs.
	resp, _ = send(t, srv.Client(), http.MethodPut, srv.URL+"/objects/a", nil, "v")
	if resp.StatusCode != http.StatusPreconditionRequired {
		t.Fatalf("no token = %d; want 428", resp.StatusCode)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("handler called %d times; want 1", n)
	}
}

type ctxKey struct{}

func TestMiddlewarePassesGuardContextToHandler(t *testing.T) {
	t.Parallel()
	g := &hookGuard{Guard: fence.NewMemory(fence.MemoryConfig{}), wrap: func(ctx context.Context) context.Context {
		return context.WithValue(ctx, ctxKey{}, "tx")
	}}
	var got any
	h := fencehttp.Middleware(g, fencehttp.Config{})(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		got = r.Context().Value(ctxKey{})
	}))
	req := httptest.NewRequest(http.MethodPut, "/", nil)
	req.Header = fencedHeader("s", "1")
	h.ServeHTTP(httptest.NewRecorder(), req)
	if got != "tx" {
		t.Fatalf("handler saw ctx value %v; want the guard's", got)
	}
}

func TestMiddlewareGuardFailure(t *testing.T) {
	t.Parallel()
	secret := errors.New("dial tcp 10.1.2.3:5432: connection refused")

	t.Run("before apply", func(t *testing.T) {
		g := &hookGuard{Guard: fence.NewMemory(fence.MemoryConfig{}), before: secret}
		var calls atomic.Int32
		h := fencehttp.Middleware(g, fencehttp.Config{})(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { calls.Add(1) }))
		req := httptest.NewRequest(http.MethodPut, "/", nil)
		req.Header = fencedHeader("s", "1")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Content-Type") != fencehttp.ContentTypeProblem {
			t.Fatalf("answer %d %q; want 503 problem+json", rec.Code, rec.Header().Get("Content-Type"))
		}
		if strings.Contains(rec.Body.String(), "10.1.2.3") {
			t.Errorf("answer leaks the guard's error: %s", rec.Body)
		}
		if calls.Load() != 0 {
			t.Errorf("handler called; want not")
		}
	})

	t.Run("after apply", func(t *testing.T) {
		g := &hookGuard{Guard: fence.NewMemory(fence.MemoryConfig{}), after: secret}
		var logs bytes.Buffer
		logger := slog.New(slog.NewJSONHandler(&logs, nil))
		h := fencehttp.Middleware(g, fencehttp.Config{Logger: logger})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusCreated)
		}))
		req := httptest.NewRequest(http.MethodPut, "/", nil)
		req.Header = fencedHeader("orders/7", "8")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusCreated {
			t.Fatalf("answer %d; want the handler's 201 (it was already sent)", rec.Code)
		}
		var rec1 map[string]any
		if err := json.Unmarshal(logs.Bytes(), &rec1); err != nil {
			t.Fatalf("log %q: %v", logs.String(), err)
		}
		if rec1["level"] != "ERROR" || rec1["scope"] != "orders/7" || rec1["presented_token"] != 8.0 {
			t.Errorf("log record %v; want ERROR with scope and presented_token", rec1)
		}
	})
}

func TestMiddlewareWaitingRequestEnds(t *testing.T) {
	t.Parallel()
	g := fence.NewMemory(fence.MemoryConfig{})
	entered := make(chan struct{})
	release := make(chan struct{})
	h := fencehttp.Middleware(g, fencehttp.Config{})(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		close(entered)
		<-release
	}))
	first := httptest.NewRequest(http.MethodPut, "/", nil)
	first.Header = fencedHeader("s", "1")
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.ServeHTTP(httptest.NewRecorder(), first)
	}()
	<-entered

	ctx, cancel := context.WithCancel(t.Context())
	cancel() // the second writer gives up while the first holds the scope
	second := httptest.NewRequestWithContext(ctx, http.MethodPut, "/", nil)
	second.Header = fencedHeader("s", "2")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, second)
	close(release)
	<-done
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("abandoned request answered %d; want 503", rec.Code)
	}
	if got := highest(t, g, "s"); got != 1 {
		t.Fatalf("highest = %d; want 1", got)
	}
}

// Many writers with interleaved tokens through a real server: the tokens the
// resource accepts, in the order it applies them, never decrease, and no two
// mutations of a scope overlap.
func TestMiddlewareConcurrentWritersNeverGoBack(t *testing.T) {
	t.Parallel()
	const (
		scopes  = 4
		writers = 12
		writes  = 40
	)
	g := fence.NewMemory(fence.MemoryConfig{})
	var (
		mu       sync.Mutex
		accepted = map[string][]uint64{}
		inside   [scopes]atomic.Int32
		overlaps atomic.Int32
	)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		scope := r.Header.Get(fencehttp.HeaderScope)
		i, _ := strconv.Atoi(strings.TrimPrefix(scope, "scope-"))
		if inside[i].Add(1) != 1 {
			overlaps.Add(1)
		}
		defer inside[i].Add(-1)
		token, err := fencehttp.ParseToken(r.Header.Get(fencehttp.HeaderToken))
		if err != nil {
			t.Errorf("handler got an unparsable token: %v", err)
		}
		mu.Lock()
		accepted[scope] = append(accepted[scope], token)
		mu.Unlock()
	})
	srv := httptest.NewServer(fencehttp.Middleware(g, fencehttp.Config{})(handler))
	t.Cleanup(srv.Close)
	tr := srv.Client().Transport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = writers * scopes
	client := &http.Client{Transport: tr}
	t.Cleanup(tr.CloseIdleConnections)

	var ok, stale atomic.Int32
	var wg sync.WaitGroup
	for s := range scopes {
		for range writers {
			wg.Go(func() {
				scope := "scope-" + strconv.Itoa(s)
				for i := range writes {
					// Tokens drift upward with overlap between writers, so
					// some arrive after a higher one and must be refused.
					token := uint64(i*3 + rand.IntN(10) + 1)
					resp, body, err := trySend(t.Context(), client, http.MethodPut, srv.URL, fencedHeader(scope, strconv.FormatUint(token, 10)), "")
					if err != nil {
						t.Error(err)
						return
					}
					switch resp.StatusCode {
					case http.StatusOK:
						ok.Add(1)
					case http.StatusConflict:
						stale.Add(1)
						p, err := fencehttp.DecodeProblem(bytes.NewReader(body))
						if err != nil {
							t.Error(err)
							return
						}
						if p.Scope != scope || p.PresentedToken != token || p.HighestToken <= token {
							t.Errorf("stale answer %+v for %s token %d", p, scope, token)
						}
					default:
						t.Errorf("unexpected status %d: %s", resp.StatusCode, body)
					}
				}
			})
		}
	}
	wg.Wait()

	if n := overlaps.Load(); n != 0 {
		t.Errorf("%d mutations of one scope overlapped", n)
	}
	total := 0
	for s := range scopes {
		scope := "scope-" + strconv.Itoa(s)
		seq := accepted[scope]
		total += len(seq)
		for i := 1; i < len(seq); i++ {
			if seq[i] < seq[i-1] {
				t.Fatalf("%s: accepted %d after %d (position %d)", scope, seq[i], seq[i-1], i)
			}
		}
		if len(seq) == 0 {
			t.Fatalf("%s: nothing accepted", scope)
		}
		if h := highest(t, g, scope); h != seq[len(seq)-1] {
			t.Errorf("%s: highest = %d; want the last accepted %d", scope, h, seq[len(seq)-1])
		}
	}
	if int(ok.Load()) != total {
		t.Errorf("%d requests answered 200 but the handler applied %d", ok.Load(), total)
	}
	if stale.Load() == 0 {
		t.Errorf("no request was refused; the test did not interleave tokens")
	}
	t.Logf("accepted %d, refused %d", ok.Load(), stale.Load())
}
