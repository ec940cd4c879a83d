package fencehttp_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencehttp"
)

func TestTransportAttachesHeaders(t *testing.T) {
	t.Parallel()
	type seen struct{ scope, token string }
	got := make(chan seen, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- seen{r.Header.Get(fencehttp.HeaderScope), strings.Join(r.Header.Values(fencehttp.HeaderToken), ",")}
	}))
	t.Cleanup(srv.Close)
	lease := &fakeLease{key: "orders/7", token: 42}
	client := &http.Client{Transport: fencehttp.NewTransport(lease, srv.Client().Transport)}

	for _, m := range []string{http.MethodPut, http.MethodGet} {
		req, err := http.NewRequestWithContext(t.Context(), m, srv.URL, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(fencehttp.HeaderToken, "7") // replaced, not added to
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if s := <-got; s.scope != "orders/7" || s.token != "42" {
			t.Errorf("%s: server saw scope %q token %q; want orders/7 and 42", m, s.scope, s.token)
		}
		if v := req.Header.Get(fencehttp.HeaderToken); v != "7" || req.Header.Get(fencehttp.HeaderScope) != "" {
			t.Errorf("%s: the caller's request was modified: %v", m, req.Header)
		}
	}
	if lost := lease.lostErrs(); len(lost) != 0 {
		t.Errorf("MarkLost called %v on accepted requests", lost)
	}
}

func TestTransportStaleAnswerLosesLeaseWithoutRetry(t *testing.T) {
	t.Parallel()
	g := fence.NewMemory(fence.MemoryConfig{})
	seed(t, g, "orders/7", 42)
	var requests atomic.Int32
	fenced := fencehttp.Middleware(g, fencehttp.Config{})(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		fenced.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	lease := &fakeLease{key: "orders/7", token: 41}
	client := &http.Client{Transport: fencehttp.NewTransport(lease, srv.Client().Transport)}

	req, err := http.NewRequestWithContext(t.Context(), http.MethodPut, srv.URL, strings.NewReader("late write"))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("Do: %v; want the 409 response, not an error", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusConflict {
		t.Fatalf("status = %d; want 409", resp.StatusCode)
	}
	// The caller still gets the whole body.
	p, err := fencehttp.DecodeProblem(resp.Body)
	if err != nil {
		t.Fatalf("the caller cannot read the problem: %v", err)
	}
	if p.HighestToken != 42 || p.PresentedToken != 41 {
		t.Errorf("problem %+v; want presented 41, highest 42", p)
	}

	lost := lease.lostErrs()
	if len(lost) != 1 {
		t.Fatalf("MarkLost called %d times; want 1", len(lost))
	}
	if !errors.Is(lost[0], fence.ErrStaleToken) {
		t.Errorf("MarkLost(%v); want an error matching ErrStaleToken", lost[0])
	}
	stale, ok := errors.AsType[*fence.StaleTokenError](lost[0])
	if !ok || *stale != (fence.StaleTokenError{Scope: "orders/7", Presented: 41, Highest: 42}) {
		t.Errorf("MarkLost(%#v); want *StaleTokenError{orders/7, 41, 42}", lost[0])
	}
	if n := requests.Load(); n != 1 {
		t.Errorf("server saw %d requests; want exactly 1 (no retry)", n)
	}
}

func TestTransportIgnoresOtherAnswers(t *testing.T) {
	t.Parallel()
	bigProblem := `{"type":"` + fencehttp.ProblemStaleToken + `","detail":"` + strings.Repeat("x", 70<<10) + `"}`
	tests := []struct {
		name        string
		status      int
		contentType string
		body        string
	}{
		{"200", http.StatusOK, "text/plain", "fine"},
		{"409 plain text", http.StatusConflict, "text/plain", `{"type":"` + fencehttp.ProblemStaleToken + `"}`},
		{"409 other problem", http.StatusConflict, fencehttp.ContentTypeProblem, `{"type":"urn:example:version-conflict","status":409}`},
		{"409 broken json", http.StatusConflict, fencehttp.ContentTypeProblem, `{"type":`},
		{"409 oversized", http.StatusConflict, fencehttp.ContentTypeProblem, bigProblem},
		{"400 invalid token", http.StatusBadRequest, fencehttp.ContentTypeProblem, `{"type":"` + fencehttp.ProblemInvalidToken + `","status":400}`},
		{"412 stale type", http.StatusPreconditionFailed, fencehttp.ContentTypeProblem, `{"type":"` + fencehttp.ProblemStaleToken + `"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", tt.contentType)
				w.WriteHeader(tt.status)
				io.WriteString(w, tt.body)
			}))
			t.Cleanup(srv.Close)
			lease := &fakeLease{key: "k", token: 1}
			client := &http.Client{Transport: fencehttp.NewTransport(lease, srv.Client().Transport)}
			resp, body := send(t, client, http.MethodPost, srv.URL, nil, "")
			if resp.StatusCode != tt.status || string(body) != tt.body {
				t.Errorf("got %d with %d body bytes; want %d with the %d bytes sent", resp.StatusCode, len(body), tt.status, len(tt.body))
			}
			if lost := lease.lostErrs(); len(lost) != 0 {
				t.Errorf("MarkLost called with %v; want no call", lost)
			}
		})
	}
}

func TestTransportWithoutLease(t *testing.T) {
	t.Parallel()
	body := &closeRecorder{Reader: strings.NewReader("x")}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPut, "http://127.0.0.1:1/", body)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (&fencehttp.Transport{}).RoundTrip(req); err == nil {
		t.Fatal("RoundTrip without a Lease succeeded")
	}
	if !body.closed {
		t.Error("request body not closed")
	}
}

type closeRecorder struct {
	io.Reader
	closed bool
}

func (c *closeRecorder) Close() error { c.closed = true; return nil }

func TestStaleFromResponseKeepsBody(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	fencehttp.WriteProblem(rec, fencehttp.StaleProblem(&fence.StaleTokenError{Scope: "s", Presented: 3, Highest: 5}))
	resp := rec.Result()
	want := rec.Body.String()
	stale, ok := fencehttp.StaleFromResponse(resp)
	if !ok || stale.Scope != "s" || stale.Presented != 3 || stale.Highest != 5 {
		t.Fatalf("StaleFromResponse = %+v, %v", stale, ok)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil || string(b) != want {
		t.Fatalf("body after peeking = %q, %v; want %q", b, err, want)
	}
}

func TestProblemFor(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err    error
		status int
		ptype  string
	}{
		{&fence.StaleTokenError{Scope: "s", Presented: 1, Highest: 2}, http.StatusConflict, fencehttp.ProblemStaleToken},
		{fence.ErrNoToken, http.StatusPreconditionRequired, fencehttp.ProblemMissingToken},
		{fencehttp.ErrInvalidToken, http.StatusBadRequest, fencehttp.ProblemInvalidToken},
		{fence.ErrInvalidScope, http.StatusBadRequest, fencehttp.ProblemInvalidScope},
		{errors.New("disk on fire"), http.StatusServiceUnavailable, fencehttp.ProblemGuardUnavailable},
	}
	for _, tt := range tests {
		p := fencehttp.ProblemFor(tt.err)
		if p == nil || p.Status != tt.status || p.Type != tt.ptype {
			t.Errorf("ProblemFor(%v) = %+v; want %d %s", tt.err, p, tt.status, tt.ptype)
		}
	}
	if p := fencehttp.ProblemFor(nil); p != nil {
		t.Errorf("ProblemFor(nil) = %+v; want nil", p)
	}
}

func TestTransportNonASCIIScope(t *testing.T) {
	t.Parallel()
	g := fence.NewMemory(fence.MemoryConfig{})
	srv, calls := newFencedServer(t, g)
	const scope = "commandes/été"
	client := &http.Client{Transport: fencehttp.NewTransport(&fakeLease{key: scope, token: 3}, srv.Client().Transport)}
	resp, body := send(t, client, http.MethodPut, srv.URL, nil, "v")
	if resp.StatusCode != http.StatusOK || calls.get(scope) != 1 || highest(t, g, scope) != 3 {
		t.Fatalf("PUT for %q: %d %s, %d calls, highest %d; want 200, 1, 3", scope, resp.StatusCode, body, calls.get(scope), highest(t, g, scope))
	}
}
