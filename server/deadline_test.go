package server_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/fencedio/fenced/internal/fencedtest"
)

// TestWaitCutByCallerDeadline checks the wire answer when the caller's
// deadline (Connect-Timeout-Ms) ends before waitMs: deadline_exceeded,
// never failed_precondition.
func TestWaitCutByCallerDeadline(t *testing.T) {
	t.Parallel()
	srv := fencedtest.Start(t)
	a := newAPI(t, srv.URL)
	a.acquire("cut/k", "holder", 60000)
	for range 5 {
		req, err := http.NewRequest(http.MethodPost, srv.URL+servicePath+"Acquire",
			strings.NewReader(`{"key":"cut/k","owner":"w","ttlMs":10000,"waitMs":10000}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Connect-Timeout-Ms", "150")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(body), `"code":"deadline_exceeded"`) {
			t.Fatalf("waited Acquire cut by Connect-Timeout-Ms: HTTP %d %s; want deadline_exceeded", resp.StatusCode, body)
		}
	}
}
