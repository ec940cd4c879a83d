package worker

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/internal/fencedtest"
	"github.com/fencedio/fenced/internal/testutil"
	"github.com/fencedio/fenced/internal/torture/history"
)

// syncBuffer is a history sink that tests can read while it is written.
type syncBuffer struct{ testutil.SyncBuffer }

func (s *syncBuffer) history(t *testing.T) *history.History {
	t.Helper()
	data := []byte(s.String())
	path := t.TempDir() + "/h.jsonl"
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	h, err := history.ReadHistory(path)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// h2cServer serves HTTP/2 without TLS, as fenced does.
func h2cServer(h http.Handler) *httptest.Server {
	s := httptest.NewUnstartedServer(h)
	s.Config.Protocols = new(http.Protocols)
	s.Config.Protocols.SetHTTP1(true)
	s.Config.Protocols.SetUnencryptedHTTP2(true)
	s.Start()
	return s
}

// untilSessionCarries makes calls until c's Session stream carries them:
// a client's first calls go unary while its new stream is probed.
func untilSessionCarries(t *testing.T, c *client.Client, buf *syncBuffer) {
	t.Helper()
	ctx := context.Background()
	testutil.Eventually(t, 10*time.Second, func() error {
		l, err := c.Acquire(ctx, "warm-up")
		if err != nil {
			return err
		}
		if err := l.Release(ctx); err != nil {
			return err
		}
		for _, op := range buf.history(t).Ops {
			if op.Via == history.ViaSession {
				return nil
			}
		}
		return errors.New("no call over the Session stream yet")
	})
}

func TestLeaseRecorderRecordsTheWire(t *testing.T) {
	for _, session := range []bool{true, false} {
		name := "unary"
		if session {
			name = "session"
		}
		t.Run(name, func(t *testing.T) { testLeaseRecorderRecordsTheWire(t, session) })
	}
}

func testLeaseRecorderRecordsTheWire(t *testing.T, session bool) {
	srv := fencedtest.Start(t)
	var buf syncBuffer
	rec := history.NewRecorder(&buf, 1, 0)
	lr := newLeaseRecorder(rec, time.Second)
	c := srv.Client(t, client.Config{HTTPClient: lr, TTL: 300 * time.Millisecond, DisableSession: !session})
	defer c.Close()
	ctx := context.Background()
	if session {
		untilSessionCarries(t, c, &buf)
	}
	wantVia := map[bool]string{true: history.ViaSession, false: ""}[session]

	l, err := c.Acquire(ctx, "k", client.WithOwner("w1-1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire(ctx, "k", client.WithOwner("w1-2")); !errors.Is(err, client.ErrHeld) {
		t.Fatalf("second acquisition: %v, want held", err)
	}
	if _, err := c.Get(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	// Wait for at least one renewal that the lease sends on its own.
	testutil.Eventually(t, 5*time.Second, func() error {
		for _, op := range buf.history(t).Ops {
			if op.Kind == history.KindRenew && op.Outcome == history.OK {
				return nil
			}
		}
		return errors.New("no renewal recorded")
	})
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Renew(ctx, "k", l.ID()); !errors.Is(err, client.ErrNotHeld) {
		t.Fatalf("renew after release: %v, want not held", err)
	}

	var acq, held, get, renew, rel, refused *history.Op
	for _, op := range buf.history(t).Ops {
		if op.Key == "warm-up" {
			continue
		}
		switch {
		case op.Kind == history.KindAcquire && op.Outcome == history.OK:
			acq = op
		case op.Kind == history.KindAcquire:
			held = op
		case op.Kind == history.KindGet:
			get = op
		case op.Kind == history.KindRenew && op.Outcome == history.OK:
			renew = op
		case op.Kind == history.KindRenew:
			refused = op
		case op.Kind == history.KindRelease:
			rel = op
		}
	}
	for name, op := range map[string]*history.Op{"grant": acq, "held": held, "get": get, "renewal": renew, "release": rel, "refused renewal": refused} {
		if op == nil {
			t.Fatalf("no %s recorded", name)
		}
		if op.Call == 0 || op.Return < op.Call || op.Worker != 1 {
			t.Errorf("%s: bad stamps %+v", name, op)
		}
	}
	// Renewals the lease sends on its own are unary (the KeepAlive
	// stream is refused by the recorder); the calls made here are not.
	for name, op := range map[string]*history.Op{"grant": acq, "held": held, "release": rel, "refused renewal": refused} {
		if op.Via != wantVia {
			t.Errorf("%s recorded via %q, want %q", name, op.Via, wantVia)
		}
	}
	if acq.Owner != "w1-1" || acq.Token != l.Token() || acq.LeaseID != l.ID() || acq.TTLMs != 300 {
		t.Errorf("grant = %+v, want owner w1-1, token %d, lease %s, ttl 300", acq, l.Token(), l.ID())
	}
	if held.Code != history.CodeHeld || held.Holder != "w1-1" || held.HolderToken != l.Token() || held.Outcome != history.Fail {
		t.Errorf("held = %+v, want held by w1-1 with token %d", held, l.Token())
	}
	if !get.HasLease || get.Holder != "w1-1" || get.HolderToken != l.Token() || get.LastToken != l.Token() {
		t.Errorf("get = %+v, want w1-1 holding %d", get, l.Token())
	}
	// Renewals and releases name the lease by its acquisition's owner.
	if renew.Owner != "w1-1" || renew.Token != l.Token() {
		t.Errorf("renewal = %+v, want owner w1-1 and token %d", renew, l.Token())
	}
	if rel.Owner != "w1-1" || rel.Outcome != history.OK {
		t.Errorf("release = %+v, want owner w1-1, ok", rel)
	}
	if refused.Code != history.CodeNotFound || refused.Outcome != history.Fail {
		t.Errorf("refused renewal = %+v, want not_found", refused)
	}
}

func TestLeaseRecorderClassifiesTransportFailures(t *testing.T) {
	// A closed port: nothing is sent, so the acquisition certainly failed.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close()
	// A server that reads the request and hangs up: the outcome is unknown.
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hl.Close()
	go func() {
		for {
			conn, err := hl.Accept()
			if err != nil {
				return
			}
			conn.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
			io.Copy(io.Discard, conn)
			conn.Close()
		}
	}()
	hangup := "http://" + hl.Addr().String()
	// A node that is not ready answers unavailable: nothing was applied.
	notReady := h2cServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, `{"code":"unavailable","message":"not ready to serve: not the leader, or no leader yet"}`)
	}))
	defer notReady.Close()
	lost := h2cServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, `{"code":"unavailable","message":"leadership lost while committing log"}`)
	}))
	defer lost.Close()

	tests := []struct {
		endpoint string
		outcome  history.Outcome
		code     string
	}{
		{closed, history.Fail, history.CodeRefused},
		{hangup, history.Unknown, history.CodeTransport},
		{notReady.URL, history.Fail, history.CodeUnavailable},
		{lost.URL, history.Unknown, "unavailable"},
	}
	for _, tt := range tests {
		t.Run(tt.code, func(t *testing.T) {
			var buf syncBuffer
			c, err := client.New(client.Config{Endpoint: tt.endpoint, HTTPClient: newLeaseRecorder(history.NewRecorder(&buf, 0, 0), time.Second)})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Acquire(context.Background(), "k", client.WithOwner("w0-1")); err == nil {
				t.Fatal("acquisition succeeded")
			}
			ops := buf.history(t).Ops
			if len(ops) != 1 || ops[0].Outcome != tt.outcome || ops[0].Code != tt.code {
				t.Fatalf("recorded %+v, want one acquisition with %s/%s", ops, tt.outcome, tt.code)
			}
		})
	}
}

// TestLeaseRecorderHeldBySelfIsUnknown: an acquisition refused because its
// own owner holds the key (a grant cut by a failover and retried) has an
// unknown outcome, not a refusal.
func TestLeaseRecorderHeldBySelfIsUnknown(t *testing.T) {
	srv := fencedtest.Start(t)
	var buf syncBuffer
	lr := newLeaseRecorder(history.NewRecorder(&buf, 1, 0), time.Second)
	c := srv.Client(t, client.Config{HTTPClient: lr, TTL: 300 * time.Millisecond})
	ctx := context.Background()
	if _, err := c.Acquire(ctx, "k", client.WithOwner("w1-1")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire(ctx, "k", client.WithOwner("w1-1")); !errors.Is(err, client.ErrHeld) {
		t.Fatalf("second acquisition: %v, want held", err)
	}
	var acquisitions []*history.Op
	for _, op := range buf.history(t).Ops {
		if op.Kind == history.KindAcquire {
			acquisitions = append(acquisitions, op)
		}
	}
	if len(acquisitions) != 2 {
		t.Fatalf("%d acquisitions recorded, want 2", len(acquisitions))
	}
	if op := acquisitions[1]; op.Outcome != history.Unknown || op.Holder != "w1-1" {
		t.Fatalf("acquisition held by its own owner recorded as %+v, want unknown", op)
	}
}

// TestSessionRecorderCutIsUnknown: a call sent on a Session stream that
// ends before its answer may have taken effect, so it is recorded unknown.
func TestSessionRecorderCutIsUnknown(t *testing.T) {
	srv := fencedtest.Start(t)
	var buf syncBuffer
	c := srv.Client(t, client.Config{HTTPClient: newLeaseRecorder(history.NewRecorder(&buf, 1, 0), time.Second), TTL: 5 * time.Second})
	defer c.Close()
	untilSessionCarries(t, c, &buf)
	ctx := context.Background()
	if _, err := c.Acquire(ctx, "k", client.WithOwner("w1-1")); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, "k", client.WithOwner("w1-2"), client.WithWait(time.Minute))
		waited <- err
	}()
	waiting := func() *history.Op {
		for _, op := range buf.history(t).Ops {
			if op.Owner == "w1-2" {
				return op
			}
		}
		return nil
	}
	testutil.Eventually(t, 10*time.Second, func() error {
		if op := waiting(); op == nil || op.Via != history.ViaSession {
			return errors.New("the waiting acquisition is not on the Session stream yet")
		}
		return nil
	})
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; err == nil {
		t.Fatal("the waiting acquisition succeeded after the node closed")
	}
	if op := waiting(); !op.Finished() || op.Outcome != history.Unknown {
		t.Fatalf("cut acquisition recorded as %+v, want unknown", op)
	}
}
