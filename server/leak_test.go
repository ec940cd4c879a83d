package server

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fencedio/fenced/internal/testutil"
)

// checkNoLeak fails t if goroutines started since before still run node
// code (fenced's or hashicorp's: raft, its WAL) 10 s after the node closed.
// Nothing signals a goroutine's end, so it polls; a goroutine that ends
// does so right after Close returns.
func checkNoLeak(t *testing.T, before map[string]string) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, func() error {
		if bad := testutil.GoroutinesSince(before, "github.com/fencedio/fenced/", "github.com/hashicorp/"); len(bad) > 0 {
			return fmt.Errorf("%d goroutines left after Close:\n\n%s", len(bad), strings.Join(bad, "\n\n"))
		}
		return nil
	})
}

// TestCloseEndsEveryGoroutine: once Close returns, nothing the node started
// still runs, whether it was closed by Close or by the end of Serve's ctx.
// Not parallel: other tests' nodes would be counted.
func TestCloseEndsEveryGoroutine(t *testing.T) {
	for _, viaServe := range []bool{false, true} {
		name := map[bool]string{false: "Close", true: "Serve's ctx"}[viaServe]
		t.Run(name, func(t *testing.T) {
			before := testutil.Goroutines()
			s := startStorageNode(t, storageConfig(t.TempDir()))
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			served := make(chan error, 1)
			go func() { served <- s.ServeListener(ctx, ln) }()
			acquireN(t, s, "k", 3)
			// A rejection watcher that never leaves: the relay it starts
			// ends with the node all the same.
			s.relay.Join()
			resp, err := http.Get("http://" + ln.Addr().String() + "/healthz")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			http.DefaultClient.CloseIdleConnections()
			if viaServe {
				cancel()
			} else {
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				cancel()
			}
			if err := <-served; err != nil {
				t.Fatalf("Serve: %v", err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			checkNoLeak(t, before)
		})
	}
}
