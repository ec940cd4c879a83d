package server

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/api/fenced/v1/fencedv1connect"
	"github.com/fencedio/fenced/lease"
	"github.com/fencedio/fenced/server/internal/api"
)

// serveTest serves s on a loopback port and returns its base URL.
func serveTest(t *testing.T, s *Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.ServeListener(context.Background(), ln)
	return "http://" + ln.Addr().String()
}

// clientFrom is an HTTP client whose connections come from the loopback
// address ip, so that tests can be several clients.
func clientFrom(t *testing.T, ip string) *http.Client {
	tr := &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}).DialContext}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

func TestWatcherLimits(t *testing.T) {
	s := newTestServer(t, Config{MaxWatchers: 3, MaxWatchersPerClient: 2})
	base := serveTest(t, s)
	res, err := s.apply(context.Background(), lease.Command{Op: lease.OpAcquire, Key: "k", ID: newLeaseID(), Owner: "o", TTL: time.Minute})
	if err != nil || res.Err != nil {
		t.Fatal(err, res.Err)
	}
	// open starts a watch from ip; it is registered once its replay of
	// the grant above arrives.
	open := func(ip string) (*connect.ServerStreamForClient[fencedv1.WatchResponse], error) {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		c := fencedv1connect.NewLeaseServiceClient(clientFrom(t, ip), base)
		st, err := c.Watch(ctx, connect.NewRequest(&fencedv1.WatchRequest{AfterRevision: res.Event.Revision - 1}))
		if err != nil {
			return nil, err
		}
		if !st.Receive() {
			return st, st.Err()
		}
		return st, nil
	}
	for _, ip := range []string{"127.0.0.1", "127.0.0.1"} {
		if _, err := open(ip); err != nil {
			t.Fatalf("watch from %s within the limits: %v", ip, err)
		}
	}
	_, err = open("127.0.0.1")
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "per client") {
		t.Fatalf("third watch from one client: %v, want resource_exhausted naming the per-client limit", err)
	}
	if _, err := open("127.0.0.2"); err != nil {
		t.Fatalf("watch from another client within the server limit: %v", err)
	}
	_, err = open("127.0.0.3")
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "on this server (limit 3)") {
		t.Fatalf("fourth watch: %v, want resource_exhausted naming the server limit", err)
	}
}

func TestEventSubscriberLimit(t *testing.T) {
	s := newTestServer(t, Config{MaxEventSubscribers: 5, MaxEventSubscribersPerClient: 1})
	base := serveTest(t, s)
	get := func(ip string) *http.Response {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		req, _ := http.NewRequestWithContext(ctx, "GET", base+"/v1/events", nil)
		resp, err := clientFrom(t, ip).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	first := get("127.0.0.1")
	if first.StatusCode != http.StatusOK {
		t.Fatalf("first subscriber: %d", first.StatusCode)
	}
	// Registered once the snapshot arrives.
	br := bufio.NewReader(first.Body)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(line, "event: snapshot") {
			break
		}
	}
	if resp := get("127.0.0.1"); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("second subscriber from one client: %d, want 429", resp.StatusCode)
	}
	if resp := get("127.0.0.2"); resp.StatusCode != http.StatusOK {
		t.Fatalf("subscriber from another client: %d, want 200", resp.StatusCode)
	}
}

// A watcher that stops reading is cut off after StreamWriteTimeout: its
// stream ends and its slot is given back, however long it stays connected.
func TestStalledWatcherIsCutOff(t *testing.T) {
	s := newTestServer(t, Config{StreamWriteTimeout: 200 * time.Millisecond, WatchHistory: 4096})
	base := serveTest(t, s)
	// Large events, so that a socket nobody reads fills up quickly.
	owner := strings.Repeat("o", api.MaxOwnerBytes)
	n := 0
	churn := func(count int) {
		var waits []func() (lease.Result, error)
		for range count {
			n++
			key := fmt.Sprintf("%s/%d", strings.Repeat("k", 400), n)
			waits = append(waits, s.applyAsync(context.Background(), lease.Command{Op: lease.OpAcquire, Key: key, ID: newLeaseID(), Owner: owner, TTL: time.Hour}))
		}
		for _, w := range waits {
			if _, err := w(); err != nil {
				t.Fatal(err)
			}
		}
	}
	churn(1)
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	conn, err := d.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"prefix":"k"}`
	env := fmt.Sprintf("\x00%s%s", string([]byte{0, 0, 0, byte(len(body))}), body)
	fmt.Fprintf(conn, "POST /fenced.v1.LeaseService/Watch HTTP/1.1\r\nHost: x\r\nContent-Type: application/connect+json\r\nContent-Length: %d\r\n\r\n%s", len(env), env)
	// Never read. The watcher registers, blocks in a send as events keep
	// coming, and is cut.
	deadline := time.Now().Add(30 * time.Second)
	registered := false
	for {
		open := s.watchers.Open()
		if open == 1 {
			registered = true
		}
		if registered && open == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("watcher that does not read still open after 30s and %d events (registered %v)", n, registered)
		}
		if registered {
			churn(200)
		} else {
			time.Sleep(10 * time.Millisecond)
		}
	}
}
