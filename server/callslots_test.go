package server

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
)

// stallCall sends, from ip, a Get whose body never arrives: the call stays
// in progress until the connection closes (or the body read timeout).
func stallCall(t *testing.T, base, ip string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}).Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprint(c, "POST /fenced.v1.LeaseService/Get HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"key\":")
	return c, bufio.NewReader(c)
}

// waitCalls waits until addr has n calls in progress.
func waitCalls(t *testing.T, s *Server, addr string, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) { // no signal to wait on
		got := s.calls.PerClient.InUse(addr)
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s has %d calls in progress, want %d", addr, got, n)
		}
	}
}

// One client address has at most MaxCallsPerClient unary calls in
// progress; the next is refused at once, before its body is read, with
// resource_exhausted naming the limit, and counted. Other addresses are
// served meanwhile, acquisitions waiting in line hold no slot, and a slot
// given back is taken again.
func TestCallsPerClient(t *testing.T) {
	s := newTestServer(t, Config{MaxCallsPerClient: 2})
	base := serveTest(t, s)
	ctx := context.Background()
	get := func(ip string) error {
		_, err := leaseClientFrom(t, base, ip).Get(ctx, connect.NewRequest(&fencedv1.GetRequest{Key: "k"}))
		return err
	}

	first, _ := stallCall(t, base, "127.0.0.2")
	stallCall(t, base, "127.0.0.2")
	waitCalls(t, s, "127.0.0.2", 2)

	// A third call whose body does not arrive either: answered anyway.
	c, br := stallCall(t, base, "127.0.0.2")
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("a call beyond the limit, its body not sent: no answer: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(body), `"resource_exhausted"`) ||
		!strings.Contains(string(body), "max-calls-per-client") {
		t.Fatalf("a call beyond the limit: %s %s, want 429 resource_exhausted naming max-calls-per-client", resp.Status, body)
	}
	err = get("127.0.0.2")
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), `client address "127.0.0.2" has 2 (limit 2)`) {
		t.Fatalf("a Get beyond the limit: %v, want resource_exhausted naming max-calls-per-client and the address", err)
	}
	if got := limitRefusals(t, s, "max-calls-per-client"); got != 2 {
		t.Errorf(`fenced_limit_refusals_total{limit="max-calls-per-client"} = %v, want 2`, got)
	}

	// Another address is served, and may wait in line for more keys than
	// it has slots.
	if err := get("127.0.0.3"); err != nil {
		t.Fatalf("a Get from another address: %v", err)
	}
	if _, err := leaseClientFrom(t, base, "127.0.0.4").Acquire(ctx,
		connect.NewRequest(&fencedv1.AcquireRequest{Key: "held", Owner: "holder", TtlMs: 60_000})); err != nil {
		t.Fatal(err)
	}
	waiter := leaseClientFrom(t, base, "127.0.0.3")
	for i := range 3 {
		if err := waitFor(t, s, waiter, "held", fmt.Sprint("w", i)); err != nil {
			t.Fatalf("waiter %d from one address with 2 slots: %v", i, err)
		}
	}
	if err := get("127.0.0.3"); err != nil {
		t.Fatalf("a Get from an address whose 3 acquisitions wait: %v", err)
	}

	// A call that ends gives its slot back.
	first.Close()
	waitCalls(t, s, "127.0.0.2", 1)
	if err := get("127.0.0.2"); err != nil {
		t.Fatalf("a Get once a slot is free: %v", err)
	}
}
