package server

import (
	"context"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"
)

// goroutines returns the stack of every running goroutine by its header
// line's id ("goroutine 7").
func goroutines() map[string]string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	all := map[string]string{}
	for _, g := range strings.Split(string(buf), "\n\n") {
		head, _, _ := strings.Cut(g, " [")
		all[head] = g
	}
	return all
}

// leaked returns the goroutines, not in before, that run code of fenced or
// hashicorp (raft, its WAL).
func leaked(before map[string]string) []string {
	var bad []string
	for id, stack := range goroutines() {
		if _, ok := before[id]; ok {
			continue
		}
		if strings.Contains(stack, "github.com/fencedio/fenced/") || strings.Contains(stack, "github.com/hashicorp/") {
			bad = append(bad, stack)
		}
	}
	return bad
}

// checkNoLeak fails t if goroutines started since before still run node
// code 10 s after the node closed. Nothing signals a goroutine's end, so it
// polls; a goroutine that ends does so right after Close returns.
func checkNoLeak(t *testing.T, before map[string]string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		bad := leaked(before)
		if len(bad) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines left after Close:\n\n%s", len(bad), strings.Join(bad, "\n\n"))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestCloseEndsEveryGoroutine: once Close returns, nothing the node started
// still runs, whether it was closed by Close or by the end of Serve's ctx.
// Not parallel: other tests' nodes would be counted.
func TestCloseEndsEveryGoroutine(t *testing.T) {
	for _, viaServe := range []bool{false, true} {
		name := map[bool]string{false: "Close", true: "Serve's ctx"}[viaServe]
		t.Run(name, func(t *testing.T) {
			before := goroutines()
			s := startStorageNode(t, storageConfig(t.TempDir()))
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			served := make(chan error, 1)
			go func() { served <- s.ServeListener(ctx, ln) }()
			acquireN(t, s, "k", 3)
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
