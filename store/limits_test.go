package store_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fencedio/fenced/internal/testpki"
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

// PUTs whose bodies are still arriving hold at most MaxInFlightBytes, and
// those of one address a quarter of it; one more is refused with 503 and
// Retry-After before its body is read, and a PUT fits again once they are
// done.
func TestInFlightBytesCap(t *testing.T) {
	addr := serveStore(t, store.Config{MaxValueBytes: 1 << 20, MaxInFlightBytes: 4 << 20, BodyReadTimeout: 10 * time.Second})
	// start sends a PUT of length bytes from ip, headers and body.
	start := func(ip, name string, length int, body string) net.Conn {
		c, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}).Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		fmt.Fprintf(c, "PUT /v1/objects/%s HTTP/1.1\r\nHost: x\r\nFencing-Scope: s\r\nFencing-Token: 1\r\nContent-Length: %d\r\n\r\n%s", name, length, body)
		return c
	}
	// stall starts a PUT of 1 MiB from ip that sends one byte of its body
	// and stops, once the store has reserved its bytes: with Expect, the
	// store asks for the body (100 Continue) only after reserving it.
	// Without that wait a probe sent next may be reserved first. A stall
	// refused busy is tried again: a probe's reservation is given back
	// only after its answer is sent.
	stall := func(ip, name string) net.Conn {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			c, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}).Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			fmt.Fprintf(c, "PUT /v1/objects/%s HTTP/1.1\r\nHost: x\r\nFencing-Scope: s\r\nFencing-Token: 1\r\nContent-Length: %d\r\nExpect: 100-continue\r\n\r\n", name, 1<<20)
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("stalled PUT from %s: %v", ip, err)
			}
			if resp.StatusCode == http.StatusContinue {
				c.SetReadDeadline(time.Time{})
				io.WriteString(c, "x")
				return c
			}
			c.Close()
			if resp.StatusCode != http.StatusServiceUnavailable || time.Now().After(deadline) {
				t.Fatalf("stalled PUT from %s answered %d, want 100 Continue", ip, resp.StatusCode)
			}
		}
	}
	// put makes a 1-byte PUT from ip, and returns its status and
	// Retry-After.
	put := func(ip string) (int, string) {
		c := start(ip, "small", 1, "x")
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("PUT from %s: %v", ip, err)
		}
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("Retry-After")
	}
	// until waits for put from ip to answer code: stalled PUTs reserve
	// once their headers arrive, and give back once the store sees them
	// gone.
	until := func(ip string, code int, why string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			got, retry := put(ip)
			if got == code {
				if code == http.StatusServiceUnavailable && retry == "" {
					t.Errorf("%s: 503 without Retry-After", why)
				}
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: PUT from %s answered %d, want %d", why, ip, got, code)
			}
		}
	}
	// A stalled PUT of 1 MiB (headers and a byte) fills 127.0.0.2's share.
	stalled := []net.Conn{stall("127.0.0.2", "slow2")}
	until("127.0.0.2", http.StatusServiceUnavailable, "its share held")
	until("127.0.0.1", http.StatusNoContent, "another address meanwhile")
	// Three more addresses fill the 4 MiB.
	for _, ip := range []string{"127.0.0.3", "127.0.0.4", "127.0.0.5"} {
		stalled = append(stalled, stall(ip, "slow"))
	}
	until("127.0.0.1", http.StatusServiceUnavailable, "4 MiB of bodies in flight")
	for _, c := range stalled {
		c.Close()
	}
	until("127.0.0.1", http.StatusNoContent, "once the stalled PUTs are gone")
	until("127.0.0.2", http.StatusNoContent, "once the stalled PUTs are gone")
}

// With Config.TLS, Serve speaks HTTP/2 to a client that asks for it in ALPN
// and HTTP/1.1 to one that does not, each behind the connection limits;
// plaintext HTTP gets no answer of the store's.
func TestServeTLS(t *testing.T) {
	ca := testpki.NewCA(t, "store")
	cert := ca.Server(t, "store")
	addr := serveStore(t, store.Config{TLS: &tls.Config{Certificates: []tls.Certificate{cert.TLS}, NextProtos: []string{"h2", "http/1.1"}}})
	for _, h2 := range []bool{true, false} {
		hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}, ForceAttemptHTTP2: h2}}
		req, _ := http.NewRequest(http.MethodPut, "https://"+addr+"/v1/objects/o", strings.NewReader("v"))
		req.Header.Set("Fencing-Scope", "s")
		req.Header.Set("Fencing-Token", "1")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("h2=%t: %v", h2, err)
		}
		resp.Body.Close()
		if want := map[bool]int{true: 2, false: 1}[h2]; resp.StatusCode != http.StatusNoContent || resp.ProtoMajor != want {
			t.Errorf("h2=%t: %s over %s, want 204 over HTTP/%d", h2, resp.Status, resp.Proto, want)
		}
	}
	if resp, err := http.Get("http://" + addr + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Error("plaintext GET /healthz on a TLS store: 200")
		}
	}
}
