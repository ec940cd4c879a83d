package server_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/fencedio/fenced/internal/fencedtest"
)

// TestRefusalsSayWhatToDo checks that the node's HTTP front explains the
// refusals connect-go makes before any method runs (the explanations
// themselves are internal/admission's TestExplainRefusals), and leaves a
// well-formed call alone.
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
	resp, body := post(t, "Get", "text/plain")
	if resp.StatusCode != http.StatusUnsupportedMediaType || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") ||
		!strings.Contains(body, "application/json") {
		t.Errorf("Get as text/plain: %d %q %q; want 415 with a plain-text body naming application/json",
			resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	resp, body = post(t, "Get", "application/json")
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, `"invalid_argument"`) {
		t.Fatalf("Get with {}: %d %s; want the Connect invalid_argument error", resp.StatusCode, body)
	}
}
