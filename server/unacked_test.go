package server

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/fencedio/fenced/lease"
)

// A Watch and a dashboard stream whose clients never read are cut once
// their connections hold more than StreamUnackedBytes unacknowledged, long
// before StreamWriteTimeout: each gets RESYNC as its last message, which a
// client that reads later finds, and the stream ends.
func TestUnreadStreamsEndWithResync(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the bound on unacknowledged bytes needs Linux")
	}
	// A watcher buffer no churn here fills: only the bound may cut.
	s := newTestServer(t, Config{StreamUnackedBytes: 32 << 10, StreamWriteTimeout: time.Hour, WatchBuffer: 1 << 16})
	base := serveTest(t, s)
	addr := strings.TrimPrefix(base, "http://")
	// Large events, so that the sockets fill up after few of them.
	owner := strings.Repeat("o", 200)
	n := 0
	churn := func(count int) {
		var waits []func() (lease.Result, error)
		for range count {
			n++
			key := fmt.Sprintf("k/%s/%d", strings.Repeat("k", 400), n)
			waits = append(waits, s.applyAsync(context.Background(), lease.Command{Op: lease.OpAcquire, Key: key, ID: newLeaseID(), Owner: owner, TTL: time.Hour}))
		}
		for _, w := range waits {
			if _, err := w(); err != nil {
				t.Fatal(err)
			}
		}
	}
	dial := func() net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	watch := dial()
	const msg = `{"prefix":"k"}`
	env := string(binary.BigEndian.AppendUint32([]byte{0}, uint32(len(msg)))) + msg
	fmt.Fprintf(watch, "POST /fenced.v1.LeaseService/Watch HTTP/1.1\r\nHost: x\r\nContent-Type: application/connect+json\r\nContent-Length: %d\r\n\r\n%s", len(env), env)
	dashboard := dial()
	fmt.Fprint(dashboard, "GET /v1/events?prefix=k HTTP/1.1\r\nHost: x\r\n\r\n")

	// Neither reads: both register, then end as events keep coming.
	registered := false
	for deadline := time.Now().Add(30 * time.Second); ; {
		w, d := s.watchers.Open(), s.subscribers.Open()
		registered = registered || w+d == 2
		if registered && w+d == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %d events, %d watchers and %d dashboards that do not read are still open (registered: %v)", n, w, d, registered)
		}
		if registered {
			churn(20)
		} else {
			time.Sleep(10 * time.Millisecond)
		}
	}
	if got := refusals(t, s, "stream-unacked-bytes"); got != 2 {
		t.Errorf("fenced_limit_refusals_total{limit=\"stream-unacked-bytes\"} = %v, want 2", got)
	}

	// Read now: each stream's last message is RESYNC, and the stream ends.
	watch.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(watch), nil)
	if err != nil {
		t.Fatal(err)
	}
	var last, end string
	for {
		var hdr [5]byte
		if _, err := io.ReadFull(resp.Body, hdr[:]); err != nil {
			t.Fatalf("the Watch stream after %q: %v (no end-of-stream message)", last, err)
		}
		b := make([]byte, binary.BigEndian.Uint32(hdr[1:]))
		if _, err := io.ReadFull(resp.Body, b); err != nil {
			t.Fatal(err)
		}
		if hdr[0]&2 != 0 {
			end = string(b)
			break
		}
		last = string(b)
	}
	if !strings.Contains(last, `"type":"RESYNC"`) || end != "{}" {
		t.Errorf("the Watch stream's last message %.200q, then end of stream %q; want RESYNC, then {}", last, end)
	}

	dashboard.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err = http.ReadResponse(bufio.NewReader(dashboard), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("the dashboard stream did not end: %v", err)
	}
	events := strings.Split(strings.TrimSuffix(string(body), "\n\n"), "\n\n")
	if lastEv := events[len(events)-1]; lastEv != "event: resync\ndata: {}" {
		t.Errorf("the dashboard stream's last event %.200q, want resync", lastEv)
	}
}

// refusals is the node's fenced_limit_refusals_total for limit.
func refusals(t *testing.T, s *Server, limit string) float64 {
	t.Helper()
	mfs, err := s.cfg.Gatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "fenced_limit_refusals_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "limit" && l.GetValue() == limit {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
