//go:build fenced_failpoints

package failstore

import (
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencedio/fenced/internal/failpoint"
)

// TestWrapAckHandlerReportsAnsweredCalls: a successful Acquire, Renew or
// Release is reported once answered; a failed one and other paths are not.
func TestWrapAckHandlerReportsAnsweredCalls(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "a.sock")
	ln, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	t.Setenv(failpoint.AckNotifyEnvVar, sock)
	h := WrapAckHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("fail") != "" {
			http.Error(w, "no", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	}))
	for _, path := range []string{
		"/fenced.v1.LeaseService/Acquire?fail=1", // refused: not reported
		"/fenced.v1.LeaseService/Get",            // not a change
		"/healthz",
		"/fenced.v1.LeaseService/Renew",
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, nil))
	}
	buf := make([]byte, 64)
	_ = ln.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := ln.Read(buf)
	if err != nil || string(buf[:n]) != "renew" {
		t.Fatalf("first report %q, %v; want only the renewal", buf[:n], err)
	}
	_ = ln.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if n, err := ln.Read(buf); err == nil {
		t.Errorf("a second report %q", buf[:n])
	}
}
