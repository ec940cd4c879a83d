package admission

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fencedio/fenced/api/fenced/v1/fencedv1connect"
)

// The refusals connect-go makes before any method runs (415, 505) carry a
// plain-text body that says what to send instead; everything else passes
// through untouched.
func TestExplainRefusals(t *testing.T) {
	path, h := fencedv1connect.NewLeaseServiceHandler(fencedv1connect.UnimplementedLeaseServiceHandler{})
	srv := httptest.NewServer(ExplainRefusals(h))
	t.Cleanup(srv.Close)
	post := func(t *testing.T, method, contentType string) (*http.Response, string) {
		t.Helper()
		resp, err := http.Post(srv.URL+path+method, contentType, strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, string(b)
	}
	for _, tc := range []struct {
		name, method, contentType string
		status                    int
		want                      []string
	}{
		{"unary with text/plain", "Get", "text/plain", http.StatusUnsupportedMediaType,
			[]string{`"text/plain"`, "Get is a unary method", "application/json", "Accept-Post"}},
		{"stream with application/json", "Watch", "application/json", http.StatusUnsupportedMediaType,
			[]string{"Watch is a stream", "application/connect+json", "envelope"}},
		{"KeepAlive over HTTP/1.1", "KeepAlive", "application/connect+json", http.StatusHTTPVersionNotSupported,
			[]string{"KeepAlive is a bidirectional stream", "HTTP/1.1", "HTTP/2", "Renew"}},
		{"Session over HTTP/1.1", "Session", "application/connect+json", http.StatusHTTPVersionNotSupported,
			[]string{"Session is a bidirectional stream", "HTTP/1.1", "HTTP/2", "unary Acquire, Renew and Release"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := post(t, tc.method, tc.contentType)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.status)
			}
			if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
				t.Errorf("Content-Type %q, want text/plain", ct)
			}
			for _, w := range tc.want {
				if !strings.Contains(body, w) {
					t.Errorf("body %q does not mention %q", body, w)
				}
			}
		})
	}
	// A call connect accepts is answered as connect answers it.
	resp, body := post(t, "Get", "application/json")
	if resp.StatusCode != http.StatusNotImplemented || !strings.Contains(body, `"unimplemented"`) {
		t.Fatalf("Get with {}: %d %s; want connect's unimplemented error", resp.StatusCode, body)
	}
}
