package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/api/fenced/v1/fencedv1connect"
	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/internal/fencedtest"
)

// renewPaths runs f with leases renewing over the shared KeepAlive stream
// (unary false) and over unary Renew calls (unary true).
func renewPaths(t *testing.T, f func(t *testing.T, unary bool)) {
	for _, unary := range []bool{false, true} {
		name := "stream"
		if unary {
			name = "unary"
		}
		t.Run(name, func(t *testing.T) { f(t, unary) })
	}
}

// renewClient is srv.Client; with unary it speaks only HTTP/1.1, over
// which the KeepAlive stream cannot run, so leases renew with Renew.
func renewClient(t *testing.T, srv *fencedtest.Server, unary bool, cfg client.Config) *client.Client {
	t.Helper()
	if unary {
		tr := &http.Transport{}
		t.Cleanup(tr.CloseIdleConnections)
		cfg.HTTPClient = &http.Client{Transport: tr}
	}
	return srv.Client(t, cfg)
}

// countingServer serves srv's API on a server of its own that counts the
// requests of each procedure.
type countingServer struct {
	*httptest.Server
	mu    sync.Mutex
	calls map[string]int
}

func newCountingServer(t *testing.T, srv *fencedtest.Server) *countingServer {
	cs := &countingServer{calls: map[string]int{}}
	cs.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cs.mu.Lock()
		cs.calls[r.URL.Path]++
		cs.mu.Unlock()
		srv.Handler().ServeHTTP(w, r)
	}))
	cs.Config.Protocols = new(http.Protocols)
	cs.Config.Protocols.SetHTTP1(true)
	cs.Config.Protocols.SetUnencryptedHTTP2(true)
	cs.Start()
	t.Cleanup(cs.Close)
	return cs
}

func (cs *countingServer) count(procedure string) int {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.calls[procedure]
}

// realTimeRenewals returns cfg set for tests that watch leases renew in
// real time against a real server: a renewal every 200ms, so that the test
// sees several quickly, but a TTL and a request timeout long enough that a
// loaded machine's stalls cost neither a lease nor a renewal stream. A
// process that gets no CPU for a few hundred milliseconds is common at a
// load of 15 on two cores; with a 600ms TTL the local deadline then passes
// before the next renewal goes out, and the client is right to lose the
// lease. What these tests check is how renewals travel, which needs no
// short TTL; the deadlines themselves are tested under synctest.
func realTimeRenewals(cfg client.Config) client.Config {
	cfg.TTL, cfg.RenewInterval, cfg.RequestTimeout = time.Minute, renewEvery, 20*time.Second
	return cfg
}

// renewEvery is the renewal interval of realTimeRenewals.
const renewEvery = 200 * time.Millisecond

// renewedTimes waits until every lease's deadline has moved past its
// first one by n renewal intervals, failing if one is lost.
func renewedTimes(t *testing.T, leases []*client.Lease, n int, interval time.Duration) {
	t.Helper()
	targets := make([]time.Time, len(leases))
	for i, l := range leases {
		targets[i] = l.Deadline().Add(time.Duration(n) * interval)
	}
	for i, l := range leases {
		for l.Deadline().Before(targets[i]) {
			select {
			case <-l.Done():
				t.Fatalf("lease %s lost while renewing: %v", l.Key(), l.Err())
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
}

// The leases of one client renew over one KeepAlive stream, not with
// Renew calls.
func TestLeasesRenewOverOneStream(t *testing.T) {
	t.Parallel()
	srv := fencedtest.Start(t)
	cs := newCountingServer(t, srv)
	c, err := client.New(realTimeRenewals(client.Config{Endpoint: cs.URL}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseIdleConnections()
	ctx := context.Background()
	var leases []*client.Lease
	for _, k := range []string{"s/1", "s/2", "s/3", "s/4", "s/5"} {
		l, err := c.Acquire(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
		leases = append(leases, l)
	}
	renewedTimes(t, leases, 3, renewEvery)
	if n := cs.count(fencedv1connect.LeaseServiceRenewProcedure); n != 0 {
		t.Errorf("%d Renew calls, want none: the leases should renew over the stream", n)
	}
	if n := cs.count(fencedv1connect.LeaseServiceKeepAliveProcedure); n != 1 {
		t.Errorf("%d KeepAlive streams, want one shared by the leases", n)
	}
}

// Against a server that cannot carry the stream (here: a client that
// speaks only HTTP/1.1) leases renew with Renew, and the stream is tried
// again only after growing pauses.
func TestLeasesFallBackToUnaryRenew(t *testing.T) {
	t.Parallel()
	srv := fencedtest.Start(t)
	cs := newCountingServer(t, srv)
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	c, err := client.New(realTimeRenewals(client.Config{Endpoint: cs.URL, HTTPClient: &http.Client{Transport: tr}}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l, err := c.Acquire(ctx, "f/1")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	start := time.Now()
	// Six renewals, counted where they arrive: how far the deadline moves
	// says how much time passed, not how many renewals a loaded machine
	// fitted in it.
	for cs.count(fencedv1connect.LeaseServiceRenewProcedure) < 6 {
		if time.Since(start) > 10*time.Second {
			t.Fatalf("%d Renew calls in 10s, want 6", cs.count(fencedv1connect.LeaseServiceRenewProcedure))
		}
		select {
		case <-l.Done():
			t.Fatalf("lease lost while renewing: %v", l.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	streams := cs.count(fencedv1connect.LeaseServiceKeepAliveProcedure)
	// Pauses of 1s, 2s, 4s...: at most one attempt per started second
	// doubling.
	if elapsed := time.Since(start); streams < 1 || streams > 2+int(elapsed/(2*time.Second)) {
		t.Errorf("%d KeepAlive attempts in %v, want at least one and few", streams, elapsed)
	}
}

// A stream that breaks, or stops answering, never costs a lease that
// Renew keeps: the renewal goes out again as a Renew at once.
func TestBrokenStreamFallsBackToUnary(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode string
		ttl  time.Duration
	}{{"ends", 3 * time.Second}, {"hangs", 3 * time.Second}, {"hangs", time.Second}} {
		mode := tc.mode
		t.Run(fmt.Sprintf("%s/ttl %v", mode, tc.ttl), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fake := &brokenStreams{mode: mode}
				_, h := fencedv1connect.NewLeaseServiceHandler(fake)
				// RequestTimeout 2s: a renewal that waited the whole
				// timeout, or half of it with a 1s TTL, on a silent stream
				// would come after the local deadline.
				c, err := client.New(client.Config{Endpoint: "http://fenced.test", HTTPClient: inProcess{h}, TTL: tc.ttl})
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				l, err := c.Acquire(context.Background(), "k")
				if err != nil {
					t.Fatal(err)
				}
				time.Sleep(30 * time.Second)
				if err := l.Err(); err != nil {
					t.Fatalf("lease lost with a %s stream: %v", mode, err)
				}
				fake.mu.Lock()
				streams, renews := fake.streams, len(fake.renewals)
				fake.mu.Unlock()
				// Pauses of 1, 2, 4, 8 and 16s between streams.
				if streams < 3 || streams > 6 || renews < int(25*time.Second/tc.ttl) {
					t.Errorf("%d streams and %d renewals in 30s, want 3 to 6 streams and three renewals a TTL", streams, renews)
				}
				l.Release(context.Background())
				synctest.Wait()
			})
		})
	}
}

// brokenStreams answers Renew, and ends (mode "ends") or stops answering
// (mode "hangs") every KeepAlive stream after its first answer.
type brokenStreams struct {
	fakeService
	mode string
}

func (b *brokenStreams) KeepAlive(ctx context.Context, stream *connect.BidiStream[fencedv1.KeepAliveRequest, fencedv1.KeepAliveResponse]) error {
	b.mu.Lock()
	b.streams++
	b.mu.Unlock()
	req, err := stream.Receive()
	if err != nil {
		return nil
	}
	l, _ := b.renew(ctx, req.Key, req.LeaseId)
	if err := stream.Send(&fencedv1.KeepAliveResponse{Lease: l}); err != nil {
		return nil
	}
	if b.mode == "hangs" {
		<-ctx.Done()
		return nil
	}
	return connect.NewError(connect.CodeInternal, errors.New("stream broken"))
}

// When the endpoint carrying the stream goes away, the renewal in flight
// fails over as a Renew to the next endpoint, and the next stream opens
// there.
func TestStreamFailsOverBetweenEndpoints(t *testing.T) {
	t.Parallel()
	srv := fencedtest.Start(t)
	first, second := newCountingServer(t, srv), newCountingServer(t, srv)
	c, err := client.New(realTimeRenewals(client.Config{Endpoints: []string{first.URL, second.URL}}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseIdleConnections()
	ctx := context.Background()
	l, err := c.Acquire(ctx, "fo/1")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	renewedTimes(t, []*client.Lease{l}, 2, renewEvery)
	// Both endpoints say they lead (they serve the same node): the stream
	// is at either.
	from, to := first, second
	if second.count(fencedv1connect.LeaseServiceKeepAliveProcedure) > 0 {
		from, to = second, first
	}
	if n := from.count(fencedv1connect.LeaseServiceKeepAliveProcedure); n != 1 {
		t.Fatalf("%d streams at the endpoint in use, want 1", n)
	}
	from.CloseClientConnections()
	from.Close()
	// The stream reopens there after a pause (of a second: the pauses are
	// timed under synctest in TestBrokenStreamFallsBackToUnary), and the
	// lease renews on.
	for start := time.Now(); to.count(fencedv1connect.LeaseServiceKeepAliveProcedure) == 0; {
		if time.Since(start) > 30*time.Second {
			t.Fatal("no stream at the other endpoint after 30s")
		}
		select {
		case <-l.Done():
			t.Fatalf("lease lost while failing over: %v", l.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	renewedTimes(t, []*client.Lease{l}, 2, renewEvery)
	if n := to.count(fencedv1connect.LeaseServiceKeepAliveProcedure); n != 1 {
		t.Errorf("%d streams at the other endpoint, want 1", n)
	}
	if n := to.count(fencedv1connect.LeaseServiceRenewProcedure); n < 1 {
		t.Errorf("no Renew at the other endpoint: the renewal in flight did not fail over")
	}
}

// Held leases cost no goroutine each: a process holding thousands of
// leases has a few goroutines for their renewals, not thousands.
//
// Not parallel: the count is the process's, and other tests' servers and
// streams would move it.
func TestHeldLeasesCostNoGoroutineEach(t *testing.T) {
	srv := fencedtest.Start(t)
	c := srv.Client(t, client.Config{TTL: time.Minute})
	defer c.CloseIdleConnections()
	ctx := context.Background()
	var leases []*client.Lease
	defer func() {
		for _, l := range leases {
			l.Release(ctx)
		}
	}()
	// The first lease opens what every lease shares (the connections, the
	// Session and KeepAlive streams and their goroutines on both sides).
	first, err := c.Acquire(ctx, "g/first")
	if err != nil {
		t.Fatal(err)
	}
	leases = append(leases, first)
	before := runtime.NumGoroutine()
	const n = 300
	for i := range n {
		l, err := c.Acquire(ctx, fmt.Sprintf("g/%d", i))
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l)
	}
	grown := runtime.NumGoroutine() - before
	t.Logf("%d goroutines more with %d more leases held", grown, n)
	if grown > n/10 {
		t.Errorf("%d goroutines more with %d more leases held", grown, n)
	}
}
