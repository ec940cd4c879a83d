package server_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/fencedio/fenced/internal/fencedtest"
)

// TestRefusalsSayWhatToDo checks that requests refused before any method
// runs answer with a body that tells the caller what to send instead.
func TestRefusalsSayWhatToDo(t *testing.T) {
	t.Parallel()
	srv := fencedtest.Start(t)
	post := func(t *testing.T, method, contentType string) (*http.Response, string) {
		t.Helper()
		resp, err := http.Post(srv.URL+servicePath+method, contentType, strings.NewReader(`{}`))
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
			[]string{`"text/plain"`, "application/json", "Accept-Post"}},
		{"stream with application/json", "Watch", "application/json", http.StatusUnsupportedMediaType,
			[]string{"application/connect+json", "envelope"}},
		{"KeepAlive over HTTP/1.1", "KeepAlive", "application/connect+json", http.StatusHTTPVersionNotSupported,
			[]string{"HTTP/2", "Renew"}},
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
	// A well-formed call is not touched.
	resp, body := post(t, "Get", "application/json")
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, `"invalid_argument"`) {
		t.Fatalf("Get with {}: %d %s; want the Connect invalid_argument error", resp.StatusCode, body)
	}
}
