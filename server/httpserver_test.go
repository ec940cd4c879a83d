package server

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fencedio/fenced/internal/testutil"
)

// rawConn dials the server at base (http://host:port).
func rawConn(t *testing.T, base string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// readResponse reads one response from c within d.
func readResponse(t *testing.T, c net.Conn, br *bufio.Reader, d time.Duration) (*http.Response, error) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(d))
	resp, err := http.ReadResponse(br, nil)
	if err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return resp, err
}

func TestOversizedHeaderRefused(t *testing.T) {
	s := newTestServer(t, Config{MaxHeaderBytes: 8 << 10})
	base := serveTest(t, s)
	req, _ := http.NewRequest("GET", base+"/healthz", nil)
	req.Header.Set("X-Big", strings.Repeat("a", 64<<10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("64 KiB header with an 8 KiB limit: %d, want 431", resp.StatusCode)
	}
}

func TestIdleConnectionClosed(t *testing.T) {
	s := newTestServer(t, Config{IdleTimeout: 200 * time.Millisecond})
	base := serveTest(t, s)
	c := rawConn(t, base)
	br := bufio.NewReader(c)
	fmt.Fprint(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp, err := readResponse(t, c, br, 5*time.Second); err != nil || resp.StatusCode != 200 {
		t.Fatalf("healthz: %v %v", resp, err)
	}
	// The connection is kept alive, then closed once idle.
	start := time.Now()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("idle keep-alive connection: %v after %v, want EOF (closed by the server)", err, time.Since(start))
	}
}

func TestSlowBodyCut(t *testing.T) {
	s := newTestServer(t, Config{BodyReadTimeout: 300 * time.Millisecond})
	base := serveTest(t, s)
	c := rawConn(t, base)
	br := bufio.NewReader(c)
	// A unary call that promises 100 bytes and sends 10.
	fmt.Fprint(c, "POST /fenced.v1.LeaseService/Get HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"key\":\"a")
	start := time.Now()
	// An answer (deadline_exceeded) or the connection closed, either way
	// well before the 10s the client waits.
	resp, err := readResponse(t, c, br, 10*time.Second)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("slow body still held after 10s")
	}
	if err == nil && resp.StatusCode != http.StatusGatewayTimeout {
		t.Fatalf("slow body answered %d, want 504 deadline_exceeded", resp.StatusCode)
	}
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Fatalf("cut after %v, before the 300ms deadline", took)
	}
	// Whatever the client sends next would be read as the rest of the
	// body: the connection closes at once, not after the idle timeout.
	if err == nil && !resp.Close {
		t.Error("the answer to a slow body keeps the connection (no Connection: close)")
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the answer to a slow body: %v, want the connection closed", err)
	}
}

func TestConnectionCapHolds(t *testing.T) {
	s := newTestServer(t, Config{MaxConns: 2})
	base := serveTest(t, s)
	healthz := func(c net.Conn, br *bufio.Reader, d time.Duration) error {
		fmt.Fprint(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		_, err := readResponse(t, c, br, d)
		return err
	}
	c1, c2, c3 := rawConn(t, base), rawConn(t, base), rawConn(t, base)
	br1, br2, br3 := bufio.NewReader(c1), bufio.NewReader(c2), bufio.NewReader(c3)
	if err := healthz(c1, br1, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := healthz(c2, br2, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := healthz(c3, br3, 500*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("third connection with a cap of 2: %v, want no answer", err)
	}
	c1.Close()
	if _, err := readResponse(t, c3, br3, 5*time.Second); err != nil {
		t.Fatalf("third connection once the first closed: %v", err)
	}
}

// A streamed message claiming 2 GiB is refused after its 5-byte prefix:
// the server answers while the client has sent nothing more.
func TestHugeMessageClaimRefusedUnread(t *testing.T) {
	s := newTestServer(t, Config{})
	base := serveTest(t, s)
	c := rawConn(t, base)
	fmt.Fprintf(c, "POST /fenced.v1.LeaseService/Watch HTTP/1.1\r\nHost: x\r\nContent-Type: application/connect+json\r\nContent-Length: %d\r\n\r\n", 5+(2<<30))
	c.Write([]byte{0, 0x80, 0, 0, 0}) // flags 0, length 2^31
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var got strings.Builder
	buf := make([]byte, 4096)
	for !strings.Contains(got.String(), "resource_exhausted") {
		n, err := c.Read(buf)
		got.Write(buf[:n])
		if err != nil {
			t.Fatalf("2 GiB claim: %v, read %q; want resource_exhausted before the body", err, got.String())
		}
	}
}

// The same claim in a chunked HTTP/1.1 body, of a silent client, is
// refused as promptly, and the connection closed.
func TestHugeMessageClaimChunkedRefused(t *testing.T) {
	s := newTestServer(t, Config{})
	base := serveTest(t, s)
	c := rawConn(t, base)
	br := bufio.NewReader(c)
	fmt.Fprint(c, "POST /fenced.v1.LeaseService/Watch HTTP/1.1\r\nHost: x\r\nContent-Type: application/connect+json\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n\x00\x80\x00\x00\x00\r\n")
	resp, err := readResponse(t, c, br, 20*time.Second)
	if err != nil {
		t.Fatalf("a chunked 2 GiB claim: %v, want an answer", err)
	}
	if !resp.Close {
		t.Errorf("the answer to a 2 GiB claim keeps the connection (no Connection: close)")
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the answer to a 2 GiB claim: %v, want the connection closed", err)
	}
}

// A client that never finishes its request headers is cut after
// ReadHeaderTimeout, unanswered.
func TestSlowHeadersCut(t *testing.T) {
	s := newTestServer(t, Config{ReadHeaderTimeout: 200 * time.Millisecond})
	base := serveTest(t, s)
	c := rawConn(t, base)
	fmt.Fprint(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := bufio.NewReader(c).ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("headers never finished: %v, want the connection closed", err)
	}
}

// Every route's body is bounded by BodyReadTimeout, counted from the
// request's start, those answered before their body is read included: a
// call refused by MaxCallsPerClient and a path that does not exist, whose
// clients trickle their bodies one byte at a time, are closed at the
// deadline (net/http reads on after the answer), long before
// ReadHeaderTimeout (10s) or the client's patience.
func TestBodyDeadlineCoversEveryRoute(t *testing.T) {
	s := newTestServer(t, Config{BodyReadTimeout: 2 * time.Second, MaxCallsPerClient: 1})
	base := serveTest(t, s)
	trickle := func(path string) (net.Conn, chan struct{}) {
		c := rawConn(t, base)
		fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{", path)
		stop := make(chan struct{})
		go func() {
			for {
				select {
				case <-stop:
					return
				case <-time.After(100 * time.Millisecond):
				}
				if _, err := c.Write([]byte{' '}); err != nil {
					return
				}
			}
		}()
		t.Cleanup(func() { close(stop) })
		return c, stop
	}
	trickle("/fenced.v1.LeaseService/Get") // holds the address's one call slot
	testutil.Eventually(t, 5*time.Second, func() error {
		if n := s.calls.PerClient.InUse("127.0.0.1"); n != 1 {
			return fmt.Errorf("%d call slots in use, want the trickled call's", n)
		}
		return nil
	})
	for _, tc := range []struct{ path, status string }{
		{"/fenced.v1.LeaseService/Get", "429"}, // refused: no slot left
		{"/nowhere", "404"},
	} {
		c, _ := trickle(tc.path)
		start := time.Now()
		c.SetReadDeadline(start.Add(8 * time.Second))
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: %v, want an answer", tc.path, err)
		}
		io.Copy(io.Discard, resp.Body)
		if !strings.HasPrefix(resp.Status, tc.status) {
			t.Errorf("%s: answered %s, want %s", tc.path, resp.Status, tc.status)
		}
		if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
			t.Errorf("%s: %v after %v, want the connection closed at the body deadline", tc.path, err, time.Since(start).Round(time.Millisecond))
		}
	}
}

// The body deadline covers the body only: an acquisition that waits in
// line longer than BodyReadTimeout after sending its body is not cut.
func TestBodyDeadlineSparesWaits(t *testing.T) {
	s := newTestServer(t, Config{BodyReadTimeout: 200 * time.Millisecond})
	base := serveTest(t, s)
	post := func(method, body string) (int, string) {
		resp, err := http.Post(base+"/fenced.v1.LeaseService/"+method, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, held := post("Acquire", `{"key":"k","owner":"a","ttlMs":60000}`)
	if code != 200 {
		t.Fatalf("acquire: %d %s", code, held)
	}
	id := held[strings.Index(held, `"leaseId":"`)+len(`"leaseId":"`):]
	id = id[:strings.IndexByte(id, '"')]
	go func() {
		time.Sleep(800 * time.Millisecond) // longer than the body deadline
		post("Release", `{"key":"k","leaseId":"`+id+`"}`)
	}()
	if code, body := post("Acquire", `{"key":"k","owner":"b","ttlMs":60000,"waitMs":10000}`); code != 200 || !strings.Contains(body, `"owner":"b"`) {
		t.Fatalf("waiting acquisition: %d %s, want the grant after the release", code, body)
	}
}
