package httplimit

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
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

// TestLimitsDefaultsAndValidate: WithDefaults fills only zero fields,
// Validate refuses negative values and changes nothing.
func TestLimitsDefaultsAndValidate(t *testing.T) {
	if d := (Limits{}).WithDefaults(); d.IdleTimeout != 60*time.Second || d.MaxConnsPerClient != min(d.MaxConns, max(64, d.MaxConns/10)) {
		t.Errorf("defaults: idle timeout %v, %d connections per client of %d", d.IdleTimeout, d.MaxConnsPerClient, d.MaxConns)
	}
	l := Limits{IdleTimeout: time.Second}
	d := l.WithDefaults()
	if l != (Limits{IdleTimeout: time.Second}) {
		t.Errorf("WithDefaults changed its receiver: %+v", l)
	}
	if d.IdleTimeout != time.Second || d.MaxHeaderBytes != 64<<10 || d.ReadHeaderTimeout != 10*time.Second ||
		d.BodyTimeout != 30*time.Second || d.MaxConns != DefaultMaxConns() {
		t.Errorf("WithDefaults = %+v", d)
	}
	if err := l.Validate(); err != nil {
		t.Errorf("Validate(%+v): %v", l, err)
	}
	bad := Limits{BodyTimeout: -time.Second}
	if err := bad.Validate(); err == nil {
		t.Error("a negative BodyTimeout was accepted")
	}
	if bad != (Limits{BodyTimeout: -time.Second}) {
		t.Errorf("Validate changed its receiver: %+v", bad)
	}
}

// serve serves h with l's limits on a loopback port and returns its
// address.
func serve(t *testing.T, l Limits, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := l.Server(h)
	go srv.Serve(l.Listener(ln, nil, 0, nil))
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// dialFrom connects to addr from the loopback address ip.
func dialFrom(t *testing.T, ip, addr string) net.Conn {
	t.Helper()
	c, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}).Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// get sends GET / on c and returns the answer, or the error reading it
// within d.
func get(c net.Conn, d time.Duration) (*http.Response, error) {
	fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(d))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err == nil {
		resp.Body.Close()
	}
	return resp, err
}

// One address holding MaxConnsPerClient connections gets no more, while
// another address is still served; a closed connection gives its slot back.
func TestConnsPerClient(t *testing.T) {
	l := Limits{MaxConns: 10, MaxConnsPerClient: 2}.WithDefaults()
	addr := serve(t, l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	a1, a2 := dialFrom(t, "127.0.0.2", addr), dialFrom(t, "127.0.0.2", addr)
	for _, c := range []net.Conn{a1, a2} {
		if _, err := get(c, 5*time.Second); err != nil {
			t.Fatalf("connection within the limit: %v", err)
		}
	}
	if _, err := get(dialFrom(t, "127.0.0.2", addr), 5*time.Second); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("third connection from one address: %v, want it closed unanswered", err)
	}
	if _, err := get(dialFrom(t, "127.0.0.3", addr), 5*time.Second); err != nil {
		t.Fatalf("a connection from another address: %v", err)
	}
	a1.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := get(dialFrom(t, "127.0.0.2", addr), 5*time.Second)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a connection once one of the address's closed: %v", err)
		}
		time.Sleep(10 * time.Millisecond) // the server sees the close when it reads
	}
}

// A network holding its share of connections gets no more, from any of
// its addresses, and refused is told the network; another network is
// still served.
func TestConnsPerNetwork(t *testing.T) {
	l := Limits{MaxConns: 10, MaxConnsPerClient: 2}.WithDefaults()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := make(chan string, 1)
	srv := l.Server(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	network := func(ip string) string { return ip[:strings.LastIndexByte(ip, '.')] + ".0/24" }
	go srv.Serve(l.Listener(ln, network, 3, func(_ net.Conn, network string) { refused <- network }))
	t.Cleanup(func() { srv.Close() })
	addr := ln.Addr().String()
	for _, ip := range []string{"127.0.0.2", "127.0.0.2", "127.0.0.3"} {
		if _, err := get(dialFrom(t, ip, addr), 5*time.Second); err != nil {
			t.Fatalf("connection from %s within the limits: %v", ip, err)
		}
	}
	if _, err := get(dialFrom(t, "127.0.0.4", addr), 5*time.Second); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a fourth connection from the network: %v, want it closed unanswered", err)
	}
	if got := <-refused; got != "127.0.0.0/24" {
		t.Errorf("refused told %q, want the network 127.0.0.0/24", got)
	}
	if _, err := get(dialFrom(t, "127.0.1.2", addr), 5*time.Second); err != nil {
		t.Fatalf("a connection from another network: %v", err)
	}
}

// An HTTP/1.1 answer given after the body failed closes the connection:
// a body cut by its deadline, and a silent chunked stream whose first
// message claims more than the limit.
func TestBodyErrorClosesConnection(t *testing.T) {
	l := Limits{BodyTimeout: 200 * time.Millisecond}.WithDefaults()
	h := EnvelopeLimit(BodyDeadline(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusGatewayTimeout)
		}
	}), l.BodyTimeout, func(r *http.Request) bool { return r.URL.Path == "/stream" }), 1<<16)
	addr := serve(t, l, h)
	for name, req := range map[string]string{
		"short body":      "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789",
		"chunked claim":   "POST /stream HTTP/1.1\r\nHost: x\r\nContent-Type: application/connect+json\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n\x00\x80\x00\x00\x00\r\n",
		"length of claim": "POST /stream HTTP/1.1\r\nHost: x\r\nContent-Type: application/connect+json\r\nContent-Length: 10\r\n\r\n\x00\x80\x00\x00\x00",
	} {
		c := dialFrom(t, "127.0.0.1", addr)
		fmt.Fprint(c, req)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: %v, want an answer", name, err)
		}
		io.Copy(io.Discard, resp.Body)
		if !resp.Close {
			t.Errorf("%s: answered %d without Connection: close", name, resp.StatusCode)
		}
		// A trickled byte that arrived after the server's last read makes
		// its close a reset: closed all the same.
		if _, err := br.ReadByte(); !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("%s: after the answer %v, want the connection closed (EOF or reset)", name, err)
		}
	}
}

// An HTTP/1.1 answer given before the body was read: a client that
// trickles the rest of its body, each read making progress, is cut at the
// body deadline, counted from the request's start, though net/http reads
// on after the answer; a client that sends its whole body gets the answer
// with no error while it writes. An answer after the whole body keeps the
// connection.
func TestEarlyAnswerBoundedByBodyDeadline(t *testing.T) {
	l := Limits{BodyTimeout: 300 * time.Millisecond}.WithDefaults()
	addr := serve(t, l, BodyDeadline(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/refuse":
			http.Error(w, "refused", http.StatusTooManyRequests)
		case "/silent": // answers nothing: net/http's 200
		default:
			io.Copy(io.Discard, r.Body)
		}
	}), l.BodyTimeout, nil))
	// answer reads the answer on c, then, if closed, the connection's
	// close, within 5 s: long before ReadHeaderTimeout would end a
	// connection that took the trickle for its next request.
	answer := func(name string, c net.Conn, closed bool) {
		t.Helper()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: %v, want an answer", name, err)
		}
		io.Copy(io.Discard, resp.Body)
		if !closed {
			return
		}
		// A trickled byte that arrived after the server's last read makes
		// its close a reset: closed all the same.
		if _, err := br.ReadByte(); !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("%s: after the answer %v, want the connection closed (EOF or reset)", name, err)
		}
	}
	for _, path := range []string{"/refuse", "/silent"} {
		c := dialFrom(t, "127.0.0.1", addr)
		fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0", path)
		stop := make(chan struct{})
		go func() { // one byte every 50 ms: every read makes progress
			for {
				select {
				case <-stop:
					return
				case <-time.After(50 * time.Millisecond):
				}
				if _, err := c.Write([]byte{'x'}); err != nil {
					return
				}
			}
		}()
		answer("trickled "+path, c, true)
		close(stop)
	}
	c := dialFrom(t, "127.0.0.1", addr)
	wrote := make(chan error, 1)
	go func() {
		_, err := fmt.Fprintf(c, "POST /refuse HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", 200<<10, make([]byte, 200<<10))
		wrote <- err
	}()
	answer("whole body refused", c, false)
	if err := <-wrote; err != nil {
		t.Errorf("sending a whole body the server refused early: %v", err)
	}

	c = dialFrom(t, "127.0.0.1", addr)
	br := bufio.NewReader(c)
	for i := range 2 {
		fmt.Fprint(c, "POST /read HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc")
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d after whole bodies on one connection: %v", i+1, err)
		}
		io.Copy(io.Discard, resp.Body)
		if resp.Close {
			t.Errorf("request %d: an answer after the whole body closed the connection", i+1)
		}
	}
}

// Shutdown closes at once a connection its client opened and never used,
// while a request in flight on another connection still gets its answer:
// net/http alone would hold the silent one for 5 seconds.
func TestShutdownClosesSilentConnections(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := Limits{}.WithDefaults()
		started, release := make(chan struct{}), make(chan struct{})
		srv := l.Server(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			close(started)
			<-release
			io.WriteString(w, "answered")
		}))
		pipes := &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
		ln := l.Listener(pipes, nil, 0, nil)
		srv.RegisterOnShutdown(ln.CloseSilent)
		go srv.Serve(ln)
		busy, silent := pipes.dial(), pipes.dial()
		answer := make(chan string, 1)
		go func() {
			fmt.Fprint(busy, "GET / HTTP/1.1\r\nHost: fenced\r\n\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(busy), nil)
			if err != nil {
				answer <- err.Error()
				return
			}
			b, _ := io.ReadAll(resp.Body)
			answer <- string(b)
		}()
		<-started

		start := time.Now()
		shutdown := make(chan error, 1)
		go func() { shutdown <- srv.Shutdown(context.Background()) }()
		if n, err := silent.Read(make([]byte, 1)); err == nil {
			t.Fatalf("the silent connection received %d bytes, want its close", n)
		}
		if waited := time.Since(start); waited >= time.Second {
			t.Errorf("the silent connection was closed %v after Shutdown began, want at once", waited)
		}
		synctest.Wait()
		select {
		case err := <-shutdown:
			t.Fatalf("Shutdown returned (%v) while a request was in flight", err)
		default:
		}
		close(release)
		if got := <-answer; got != "answered" {
			t.Errorf("request in flight: got %q, want its answer", got)
		}
		if err := <-shutdown; err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
}

// pipeListener accepts the server ends of net.Pipe connections.
type pipeListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

// dial returns the client end of a new connection to l.
func (l *pipeListener) dial() net.Conn {
	client, server := net.Pipe()
	l.conns <- server
	return client
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }
