package store_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fencedio/fenced/store"
)

// serveStore serves a store with cfg's limits on a loopback port.
func serveStore(t *testing.T, cfg store.Config) string {
	t.Helper()
	s := newStore(t, cfg)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Serve(ctx, ln); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return ln.Addr().String()
}

func TestServeLimits(t *testing.T) {
	addr := serveStore(t, store.Config{MaxHeaderBytes: 8 << 10, IdleTimeout: 2 * time.Second,
		BodyReadTimeout: 300 * time.Millisecond, MaxConns: 2})
	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, bufio.NewReader(c)
	}
	get := func(c net.Conn, br *bufio.Reader, header string, d time.Duration) (int, error) {
		fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n%s\r\n", header)
		c.SetReadDeadline(time.Now().Add(d))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}

	t.Run("header", func(t *testing.T) {
		c, br := dial()
		if code, err := get(c, br, "X-Big: "+strings.Repeat("a", 64<<10)+"\r\n", 5*time.Second); code != 431 {
			t.Fatalf("64 KiB header: %d %v, want 431", code, err)
		}
	})
	t.Run("idle and cap", func(t *testing.T) {
		c1, br1 := dial()
		if code, err := get(c1, br1, "", 5*time.Second); code != 200 {
			t.Fatalf("healthz: %d %v", code, err)
		}
		c2, br2 := dial()
		if code, err := get(c2, br2, "", 5*time.Second); code != 200 {
			t.Fatalf("healthz: %d %v", code, err)
		}
		c3, br3 := dial()
		if _, err := get(c3, br3, "", 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("third connection with a cap of 2: %v, want no answer", err)
		}
		// The first two are closed once idle, which frees slots.
		c1.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := br1.ReadByte(); !errors.Is(err, io.EOF) {
			t.Fatalf("idle connection: %v, want EOF", err)
		}
		c3.SetReadDeadline(time.Now().Add(10 * time.Second))
		if resp, err := http.ReadResponse(br3, nil); err != nil || resp.StatusCode != 200 {
			t.Fatalf("third connection once a slot was free: %v", err)
		}
	})
	t.Run("slow body", func(t *testing.T) {
		c, br := dial()
		fmt.Fprint(c, "PUT /v1/objects/a HTTP/1.1\r\nHost: x\r\nFencing-Scope: s\r\nFencing-Token: 1\r\nContent-Length: 100\r\n\r\nabc")
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadAll(br); errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatal("slow body still held after 10s")
		}
	})
}

// PUTs whose bodies are still arriving hold at most MaxInFlightBytes; one
// more is refused with 503 and Retry-After before its body is read, and a
// PUT fits again once they are done.
func TestInFlightBytesCap(t *testing.T) {
	addr := serveStore(t, store.Config{MaxValueBytes: 1 << 20, MaxInFlightBytes: 2 << 20, BodyReadTimeout: 10 * time.Second})
	put := func(name string, body io.Reader, length int64) (*http.Response, error) {
		req, _ := http.NewRequest("PUT", "http://"+addr+"/v1/objects/"+name, body)
		req.ContentLength = length
		req.Header.Set("Fencing-Scope", "s")
		req.Header.Set("Fencing-Token", "1")
		return http.DefaultClient.Do(req)
	}
	// Two PUTs of 1 MiB that send their headers and a byte, then stall.
	var stalled []net.Conn
	for i := range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "PUT /v1/objects/slow%d HTTP/1.1\r\nHost: x\r\nFencing-Scope: s\r\nFencing-Token: 1\r\nContent-Length: %d\r\n\r\nx", i, 1<<20)
		stalled = append(stalled, c)
	}
	// Once both hold their bytes, a third is refused.
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := put("third", strings.NewReader("x"), 1)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable {
			if resp.Header.Get("Retry-After") == "" {
				t.Error("503 without Retry-After")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a PUT while 2 MiB of bodies are in flight (limit 2 MiB): %d, want 503", resp.StatusCode)
		}
		time.Sleep(10 * time.Millisecond) // the stalled PUTs reserve once their headers arrive
	}
	for _, c := range stalled {
		c.Close()
	}
	// Their bytes are given back once the store sees them gone.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		resp, err := put("fourth", strings.NewReader("x"), 1)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusNoContent {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a PUT once the others ended: %d, want 204", resp.StatusCode)
		}
	}
}
