package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/api/fenced/v1/fencedv1connect"
	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/internal/fencedtest"
	"google.golang.org/protobuf/proto"
)

func waitDone(t *testing.T, l *client.Lease, within time.Duration) {
	t.Helper()
	select {
	case <-l.Done():
	case <-time.After(within):
		t.Fatalf("lease %q not ended within %v", l.Key(), within)
	}
}

func TestLostWhenRenewalRefused(t *testing.T) {
	t.Parallel()
	renewPaths(t, func(t *testing.T, unary bool) {
		srv := fencedtest.Start(t)
		c := renewClient(t, srv, unary, realTimeRenewals(client.Config{}))
		ctx := context.Background()
		l, err := c.Acquire(ctx, "jobs/1")
		if err != nil {
			t.Fatal(err)
		}
		// Someone with the lease ID ends the lease behind the holder's back.
		if err := c.Release(ctx, l.Key(), l.ID()); err != nil {
			t.Fatal(err)
		}
		waitDone(t, l, 2*time.Second)
		if err := l.Err(); !errors.Is(err, client.ErrLost) || !errors.Is(err, client.ErrNotHeld) {
			t.Fatalf("cause = %v, want ErrLost and ErrNotHeld", err)
		}
		if err := l.Release(ctx); !errors.Is(err, client.ErrNotHeld) {
			t.Fatalf("release of a lost lease = %v, want ErrNotHeld", err)
		}
	})
}

func TestLostReportedByGuard(t *testing.T) {
	t.Parallel()
	srv := fencedtest.Start(t)
	c := srv.Client(t, client.Config{TTL: 5 * time.Second})
	ctx := context.Background()
	l, err := c.Acquire(ctx, "jobs/2")
	if err != nil {
		t.Fatal(err)
	}
	stale := &fence.StaleTokenError{Scope: "jobs/2", Presented: l.Token(), Highest: l.Token() + 1}
	l.MarkLost(stale)
	waitDone(t, l, time.Second)
	if err := context.Cause(l.Context()); !errors.Is(err, client.ErrLost) || !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("cause = %v, want ErrLost and ErrStaleToken", err)
	}
	// The client does not re-acquire on its own (MarkLost releases in the
	// background, see TestLostReleasesOnServer).
	if got, err := c.Get(ctx, "jobs/2"); err != nil || (got.Lease != nil && got.Lease.Token != l.Token()) {
		t.Fatalf("after MarkLost: %+v %v", got, err)
	}
}

func TestOrphanKeepsLeaseOnServer(t *testing.T) {
	t.Parallel()
	srv := fencedtest.Start(t)
	c := srv.Client(t, client.Config{TTL: 5 * time.Second})
	ctx := context.Background()
	l, err := c.Acquire(ctx, "jobs/4")
	if err != nil {
		t.Fatal(err)
	}
	l.Orphan()
	waitDone(t, l, time.Second)
	if err := l.Err(); !errors.Is(err, client.ErrLost) {
		t.Fatalf("cause = %v, want ErrLost", err)
	}
	// Orphan neither renews nor releases: the server still shows the
	// lease, which another process can renew with its ID.
	got, err := c.Get(ctx, "jobs/4")
	if err != nil || got.Lease == nil || got.Lease.Token != l.Token() {
		t.Fatalf("after Orphan: %+v %v", got, err)
	}
	if _, err := c.Renew(ctx, l.Key(), l.ID()); err != nil {
		t.Fatalf("renewal of the orphaned lease by ID: %v", err)
	}
	if err := c.Release(ctx, l.Key(), l.ID()); err != nil {
		t.Fatal(err)
	}
}

func TestRenewalKeepsTokenPastTTL(t *testing.T) {
	t.Parallel()
	renewPaths(t, func(t *testing.T, unary bool) {
		srv := fencedtest.Start(t)
		// The server's default MinTTL: a shorter TTL leaves a renewal
		// less time than a loaded machine may take to schedule it.
		const ttl = time.Second
		c := renewClient(t, srv, unary, client.Config{TTL: ttl})
		ctx := context.Background()
		l, err := c.Acquire(ctx, "jobs/3")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
		// Wait for a TTL's worth of renewals by watching the deadline move.
		first := l.Deadline()
		deadline := time.Now().Add(5 * time.Second)
		for l.Deadline().Before(first.Add(ttl)) {
			if time.Now().After(deadline) {
				t.Fatalf("deadline moved from %v to %v in 5s, want a TTL further", first, l.Deadline())
			}
			select {
			case <-l.Done():
				t.Fatalf("lease lost while renewing: %v", l.Err())
			case <-time.After(20 * time.Millisecond):
			}
		}
		got, err := c.Get(ctx, "jobs/3")
		if err != nil || got.Lease == nil || got.Lease.Token != l.Token() || got.Lease.ID != "" {
			t.Fatalf("after renewals: %+v %v, want token %d", got, err, l.Token())
		}
	})
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, cfg := range []client.Config{
		{TTL: time.Second, RenewInterval: time.Second},
		{TTL: time.Second, RenewInterval: -1},
		{TTL: time.Microsecond},
		{RequestTimeout: -time.Second},
		{ClockDrift: -0.001},
		{ClockDrift: 0.5},
		{DeadlineMargin: -time.Millisecond},
		// 10ms less 7ms leaves less than TTL/3.
		{TTL: 10 * time.Millisecond, DeadlineMargin: 7 * time.Millisecond},
	} {
		if _, err := client.New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
	for _, cfg := range []client.Config{
		{},
		{TTL: time.Second, RenewInterval: 900 * time.Millisecond, ClockDrift: 0.01, DeadlineMargin: 100 * time.Millisecond},
	} {
		if _, err := client.New(cfg); err != nil {
			t.Errorf("New(%+v): %v", cfg, err)
		}
	}
}

// fakeService answers in process, so the client can run inside a synctest
// bubble where time is simulated.
type fakeService struct {
	fencedv1connect.UnimplementedLeaseServiceHandler
	mu            sync.Mutex
	failFrom      time.Time     // renewals at or after this fail as unavailable
	delay         time.Duration // each renewal takes this long to answer
	acquireDelay  time.Duration // each acquisition is granted this long after it arrives (a wait)
	renewals      []time.Time   // when each successful renewal arrived
	releases      []string      // the lease IDs of the releases received
	hangRelease   bool          // releases get no answer until their context ends
	unary         bool          // KeepAlive is not implemented
	onRenew       func()        // called as each successful renewal is answered
	streams       int           // KeepAlive streams opened
	noSession     bool          // Session is not implemented
	sessions      int           // Session streams opened
	sessionsEnded int           // and ended
	sessionCalls  int           // calls received on them, probes and cancels left out
	running       int           // Session calls being served
	// acquireDelays, when set, is the delay of each key's grant, instead of acquireDelay.
	acquireDelays map[string]time.Duration
}

func (f *fakeService) Acquire(ctx context.Context, req *connect.Request[fencedv1.AcquireRequest]) (*connect.Response[fencedv1.AcquireResponse], error) {
	f.mu.Lock()
	wait := f.acquireDelay
	if d, ok := f.acquireDelays[req.Msg.Key]; ok {
		wait = d
	}
	f.mu.Unlock()
	if err := pause(ctx, wait); err != nil {
		return nil, err
	}
	return connect.NewResponse(&fencedv1.AcquireResponse{Lease: &fencedv1.Lease{
		Key: req.Msg.Key, LeaseId: proto.String("0123456789abcdef0123456789abcdef"), Token: 7, TtlMs: req.Msg.TtlMs,
	}}), nil
}

func (f *fakeService) Renew(ctx context.Context, req *connect.Request[fencedv1.RenewRequest]) (*connect.Response[fencedv1.RenewResponse], error) {
	l, err := f.renew(ctx, req.Msg.Key, req.Msg.LeaseId)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&fencedv1.RenewResponse{Lease: l}), nil
}

// KeepAlive renews as Renew does, answering in order; with unary set it is
// not implemented, as on a server without it.
func (f *fakeService) KeepAlive(ctx context.Context, stream *connect.BidiStream[fencedv1.KeepAliveRequest, fencedv1.KeepAliveResponse]) error {
	f.mu.Lock()
	f.streams++
	unary := f.unary
	f.mu.Unlock()
	if unary {
		return connect.NewError(connect.CodeUnimplemented, errors.New("no KeepAlive here"))
	}
	for {
		req, err := stream.Receive()
		if err != nil {
			return nil
		}
		resp := &fencedv1.KeepAliveResponse{}
		if l, err := f.renew(ctx, req.Key, req.LeaseId); err != nil {
			resp.ErrorCode, resp.ErrorMessage = connect.CodeOf(err).String(), err.Error()
		} else {
			resp.Lease = l
		}
		if err := stream.Send(resp); err != nil {
			return nil
		}
	}
}

func (f *fakeService) renew(ctx context.Context, key, id string) (*fencedv1.Lease, error) {
	arrived := time.Now()
	f.mu.Lock()
	failing := !f.failFrom.IsZero() && !arrived.Before(f.failFrom)
	delay := f.delay
	if !failing {
		f.renewals = append(f.renewals, arrived)
	}
	f.mu.Unlock()
	if err := pause(ctx, delay); err != nil {
		return nil, err
	}
	if failing {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("partitioned"))
	}
	f.mu.Lock()
	onRenew := f.onRenew
	f.mu.Unlock()
	if onRenew != nil {
		onRenew()
	}
	return &fencedv1.Lease{Key: key, LeaseId: proto.String(id), Token: 7}, nil
}

func (f *fakeService) Release(ctx context.Context, req *connect.Request[fencedv1.ReleaseRequest]) (*connect.Response[fencedv1.ReleaseResponse], error) {
	f.mu.Lock()
	f.releases = append(f.releases, req.Msg.LeaseId)
	hang := f.hangRelease
	f.mu.Unlock()
	if hang {
		<-ctx.Done()
		return nil, connect.NewError(connect.CodeDeadlineExceeded, ctx.Err())
	}
	return connect.NewResponse(&fencedv1.ReleaseResponse{}), nil
}

func (f *fakeService) released() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.releases...)
}

func (f *fakeService) renewedAt() []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Time(nil), f.renewals...)
}

// inProcess carries requests to h in process, as HTTP/2 would: the
// response comes back as soon as its header is written, and its body
// streams while the request body is still being written, so that the
// KeepAlive stream works inside a synctest bubble.
// pause is the fake's time to answer: d, or less when the caller gives up,
// as a server's handler ends when its request is cancelled.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return connect.NewError(connect.CodeDeadlineExceeded, ctx.Err()) // as fenced answers
		}
		return connect.NewError(connect.CodeCanceled, ctx.Err())
	}
}

type inProcess struct{ h http.Handler }

func (p inProcess) Do(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Proto, req.ProtoMajor, req.ProtoMinor = "HTTP/2.0", 2, 0
	if req.Body == nil {
		req.Body = http.NoBody
	}
	pr, pw := io.Pipe()
	// As a transport does, a cancelled request ends both bodies.
	stop := context.AfterFunc(req.Context(), func() {
		req.Body.Close()
		pr.Close()
	})
	w := &streamedResponse{header: http.Header{}, body: pw, ready: make(chan struct{})}
	go func() {
		defer stop()
		p.h.ServeHTTP(w, req)
		w.WriteHeader(http.StatusOK) // a handler that wrote nothing
		pw.Close()
		req.Body.Close() // as a server does once its handler returns
	}()
	select {
	case <-w.ready:
	case <-req.Context().Done():
		pr.Close()
		return nil, req.Context().Err()
	}
	return &http.Response{Status: http.StatusText(w.status), StatusCode: w.status, Proto: "HTTP/2.0", ProtoMajor: 2,
		Header: w.sent, Body: pr, ContentLength: -1, Request: req}, nil
}

// streamedResponse is the http.ResponseWriter of inProcess.
type streamedResponse struct {
	header, sent http.Header
	status       int
	body         *io.PipeWriter
	ready        chan struct{} // closed once the header is written
}

func (w *streamedResponse) Header() http.Header { return w.header }

func (w *streamedResponse) WriteHeader(status int) {
	if w.sent != nil {
		return
	}
	w.status, w.sent = status, w.header.Clone()
	close(w.ready)
}

func (w *streamedResponse) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.body.Write(b)
}

func (w *streamedResponse) Flush() {}

// TestLocalDeadlineCountsFromSend: when renewals stop succeeding, the lease
// is lost one TTL, less the drift margin, after the last successful renewal
// was sent, even though its answer arrived later.
func TestLocalDeadlineCountsFromSend(t *testing.T) {
	t.Parallel()
	renewPaths(t, func(t *testing.T, unary bool) {
		const ttl = 3 * time.Second
		for _, tc := range []struct {
			name   string
			drift  float64
			margin time.Duration
			want   time.Duration // from the send of the last successful renewal
		}{
			// 0.1% of the TTL for clock drift, and 10ms.
			{"default margin", 0, 0, ttl - 3*time.Millisecond - 10*time.Millisecond},
			{"configured margin", 0.01, 50 * time.Millisecond, ttl - 30*time.Millisecond - 50*time.Millisecond},
		} {
			t.Run(tc.name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					fake := &fakeService{delay: 200 * time.Millisecond}
					fake.unary = unary
					c := fakeClient(t, fake, client.Config{TTL: ttl, ClockDrift: tc.drift, DeadlineMargin: tc.margin})
					start := time.Now()
					l, err := c.Acquire(context.Background(), "k")
					if err != nil {
						t.Fatal(err)
					}
					if got, want := l.Deadline(), start.Add(tc.want); !got.Equal(want) {
						t.Fatalf("deadline after the acquisition %v after its send, want %v", got.Sub(start), tc.want)
					}
					fake.mu.Lock()
					fake.failFrom = start.Add(5 * time.Second)
					fake.mu.Unlock()

					<-l.Done()
					lostAt := time.Now()
					renewals := fake.renewedAt()
					if len(renewals) < 2 {
						t.Fatalf("only %d successful renewals before failures began", len(renewals))
					}
					last := renewals[len(renewals)-1]
					if want := last.Add(tc.want); !lostAt.Equal(want) {
						t.Fatalf("lost at %v after start, want %v (last successful renewal sent at %v)",
							lostAt.Sub(start), want.Sub(start), last.Sub(start))
					}
					if !errors.Is(l.Err(), client.ErrLost) {
						t.Fatalf("cause %v, want ErrLost", l.Err())
					}
				})
			})
		}
	})
}

func TestKeepAliveStream(t *testing.T) {
	t.Parallel()
	srv := fencedtest.Start(t)
	c := srv.Client(t, client.Config{TTL: 5 * time.Second})
	ctx := context.Background()
	l, err := c.Acquire(ctx, "ka/1")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	ka := c.KeepAlive(ctx)
	defer ka.Close()
	for i := 0; i < 3; i++ {
		info, err := ka.Renew("ka/1", l.ID())
		if err != nil || info.Token != l.Token() || info.ID != l.ID() {
			t.Fatalf("renewal %d: %+v, %v", i, info, err)
		}
	}
	// A refused renewal is an answer, not the end of the stream.
	if _, err := ka.Renew("ka/1", "0000"); !errors.Is(err, client.ErrNotHeld) {
		t.Fatalf("renewal of an unknown lease: %v, want ErrNotHeld", err)
	}
	if _, err := ka.Renew("", l.ID()); !errors.Is(err, client.ErrInvalid) {
		t.Fatalf("renewal with no key: %v, want ErrInvalid", err)
	}
	if info, err := ka.Renew("ka/1", l.ID()); err != nil || info.Token != l.Token() {
		t.Fatalf("renewal after refusals: %+v, %v", info, err)
	}
}

// The default client sends unary calls over reused HTTP/1.1 connections
// and streams (Session, KeepAlive) over HTTP/2; with DisableSession every
// Acquire and Release is a unary call.
func TestDefaultTransports(t *testing.T) {
	t.Parallel()
	for _, disable := range []bool{false, true} {
		t.Run(fmt.Sprintf("DisableSession=%v", disable), func(t *testing.T) {
			t.Parallel()
			testDefaultTransports(t, disable)
		})
	}
}

func testDefaultTransports(t *testing.T, disableSession bool) {
	srv := fencedtest.Start(t)
	var mu sync.Mutex
	protos := map[string]string{} // procedure -> protocol seen
	conns := 0
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		if p, seen := protos[r.URL.Path]; seen && p != r.Proto {
			t.Errorf("%s went over %s and %s", r.URL.Path, p, r.Proto)
		}
		protos[r.URL.Path] = r.Proto
		mu.Unlock()
		srv.Handler().ServeHTTP(w, r)
	}))
	ts.Config.Protocols = new(http.Protocols)
	ts.Config.Protocols.SetHTTP1(true)
	ts.Config.Protocols.SetUnencryptedHTTP2(true)
	ts.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			mu.Lock()
			conns++
			mu.Unlock()
		}
	}
	ts.Start()
	defer ts.Close()

	c, err := client.New(client.Config{Endpoint: ts.URL, TTL: 5 * time.Second, DisableSession: disableSession})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	for range 20 {
		l, err := c.Acquire(ctx, "proto/1")
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	l, err := c.Acquire(ctx, "proto/1")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	ka := c.KeepAlive(ctx)
	if _, err := ka.Renew("proto/1", l.ID()); err != nil {
		t.Fatal(err)
	}
	ka.Close()

	mu.Lock()
	defer mu.Unlock()
	want := map[string]string{
		fencedv1connect.LeaseServiceKeepAliveProcedure: "HTTP/2.0",
	}
	if disableSession {
		want[fencedv1connect.LeaseServiceAcquireProcedure] = "HTTP/1.1"
		want[fencedv1connect.LeaseServiceReleaseProcedure] = "HTTP/1.1"
		if _, used := protos[fencedv1connect.LeaseServiceSessionProcedure]; used {
			t.Errorf("a Session stream was opened with DisableSession")
		}
	} else {
		// The first calls go unary while the new stream is probed.
		want[fencedv1connect.LeaseServiceSessionProcedure] = "HTTP/2.0"
		for path, proto := range protos {
			if path != fencedv1connect.LeaseServiceSessionProcedure && path != fencedv1connect.LeaseServiceKeepAliveProcedure && proto != "HTTP/1.1" {
				t.Errorf("unary %s went over %s, want HTTP/1.1", path, proto)
			}
		}
	}
	for path, proto := range want {
		if protos[path] != proto {
			t.Errorf("%s went over %q, want %s", path, protos[path], proto)
		}
	}
	// One HTTP/1.1 connection reused by the sequential calls, one HTTP/2.
	if conns != 2 {
		t.Errorf("%d connections opened, want 2", conns)
	}
}
