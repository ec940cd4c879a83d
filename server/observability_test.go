package server_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/api/fenced/v1/fencedv1connect"
	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/internal/fencedtest"
	"github.com/fencedio/fenced/internal/testutil"
)

// scrape returns the samples of /metrics whose names start with fenced_,
// keyed by name and labels as exposed.
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "fenced_") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

func TestMetricsCountKnownOperations(t *testing.T) {
	srv := fencedtest.Start(t)
	ctx := context.Background()
	c := srv.Client(t, client.Config{TTL: 5 * time.Second})
	rpc := fencedv1connect.NewLeaseServiceClient(http.DefaultClient, srv.URL)

	// 3 grants, 1 held, 2 invalid; 1 renewal ok, 1 renewal of an unknown
	// lease; 2 releases ok, 1 release refused; 1 expiry (and takeover).
	var leases []*client.Lease
	for _, k := range []string{"m/a", "m/b"} {
		l, err := c.Acquire(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l)
	}
	if _, err := c.Acquire(ctx, "m/a"); !errors.Is(err, client.ErrHeld) {
		t.Fatalf("want held, got %v", err)
	}
	for _, bad := range []*fencedv1.AcquireRequest{{Key: "", TtlMs: 1000}, {Key: "m/c", TtlMs: 0}} {
		if _, err := rpc.Acquire(ctx, connect.NewRequest(bad)); connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Fatalf("want invalid_argument, got %v", err)
		}
	}
	if _, err := c.Renew(ctx, "m/a", leases[0].ID()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Renew(ctx, "m/a", "ffff"); !errors.Is(err, client.ErrNotHeld) {
		t.Fatalf("want not held, got %v", err)
	}
	if err := c.Release(ctx, "m/a", "ffff"); !errors.Is(err, client.ErrNotHeld) {
		t.Fatalf("want not held, got %v", err)
	}
	for _, l := range leases {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// A short lease that nobody renews expires; its next grant is a takeover.
	expired, err := rpc.Acquire(ctx, connect.NewRequest(&fencedv1.AcquireRequest{Key: "m/x", Owner: "gone", TtlMs: 150}))
	if err != nil {
		t.Fatal(err)
	}
	taken, err := c.Acquire(ctx, "m/x", client.WithWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if taken.Token() <= expired.Msg.Lease.Token {
		t.Fatalf("takeover token %d not above %d", taken.Token(), expired.Msg.Lease.Token)
	}
	defer taken.Release(ctx)

	got := scrape(t, srv.URL)
	want := map[string]float64{
		`fenced_acquisitions_total{result="granted"}`: 4,
		`fenced_acquisitions_total{result="held"}`:    1,
		`fenced_acquisitions_total{result="invalid"}`: 2,
		`fenced_acquisitions_total{result="error"}`:   0,
		`fenced_renewals_total{result="renewed"}`:     1,
		`fenced_renewals_total{result="not_found"}`:   1,
		`fenced_releases_total{result="released"}`:    2,
		`fenced_releases_total{result="not_found"}`:   1,
		`fenced_expirations_total`:                    1,
		`fenced_takeovers_total`:                      1,
		`fenced_tokens_issued_total`:                  4,
		`fenced_leases_active`:                        1,
		`fenced_waiters`:                              0,
		`fenced_is_leader`:                            1,
	}
	for name, w := range want {
		if g, ok := got[name]; !ok || g != w {
			t.Errorf("%s = %v (present %v), want %v", name, g, ok, w)
		}
	}
	if got[`fenced_request_duration_seconds_count{method="Acquire"}`] != 7 {
		t.Errorf("Acquire latency count = %v, want 7", got[`fenced_request_duration_seconds_count{method="Acquire"}`])
	}
	for name := range got {
		if strings.Contains(name, "m/") {
			t.Errorf("metric %s carries a key label", name)
		}
	}
}

func TestTransitionsAreLogged(t *testing.T) {
	var logs testutil.SyncBuffer
	cfg := fencedtest.Config(t)
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	srv := fencedtest.StartConfig(t, cfg)
	ctx := context.Background()
	c := srv.Client(t, client.Config{TTL: 5 * time.Second, Owner: "w1"})
	l, err := c.Acquire(ctx, "log/k")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Renew(ctx, "log/k", l.ID()); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	for _, msg := range []string{"lease acquired", "lease renewed", "lease released"} {
		want := fmt.Sprintf("msg=%q scope=log/k owner=w1 lease_id=%s token=%d", msg, fingerprint(l.ID()), l.Token())
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q\n%s", want, out)
		}
	}
	// A restart replays the log; the replayed transitions are not logged
	// a second time.
	srv.Restart(t)
	if again := logs.String(); strings.Count(again, `msg="lease acquired"`) != 1 || strings.Count(again, `msg="lease released"`) != 1 {
		t.Errorf("transitions logged again on restart:\n%s", again)
	}
}

// TestSlowWatcherDoesNotSlowAcquisitions: a watcher that never reads its
// stream must not hold up grants; it is cut off with a RESYNC instead.
func TestSlowWatcherDoesNotSlowAcquisitions(t *testing.T) {
	cfg := fencedtest.Config(t)
	cfg.WatchBuffer = 16
	srv := fencedtest.StartConfig(t, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	stalled := openStalledWatcher(t, ctx, srv.URL)

	c := srv.Client(t, client.Config{TTL: 5 * time.Second})
	// Far more events than the watcher's buffer and its connection's
	// windows can take.
	const n = 600
	start := time.Now()
	for i := 0; i < n; i++ {
		l, err := c.Acquire(ctx, fmt.Sprintf("slow/%d", i))
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d acquire+release cycles with a stalled watcher took %v", n, time.Since(start))

	// The stalled watcher was cut off: reading it now yields what was
	// buffered, then a RESYNC.
	resp, ok := <-stalled
	if !ok {
		t.FailNow()
	}
	defer resp.Body.Close()
	found := make(chan bool, 1)
	go func() {
		var seen strings.Builder
		buf := make([]byte, 32<<10)
		for {
			k, err := resp.Body.Read(buf)
			seen.Write(buf[:k])
			if strings.Contains(seen.String(), `"RESYNC"`) {
				found <- true
				return
			}
			if err != nil {
				t.Logf("read %d bytes, ending %q: %v", seen.Len(), seen.String()[max(0, seen.Len()-300):], err)
				found <- false
				return
			}
		}
	}()
	select {
	case ok := <-found:
		if !ok {
			t.Fatal("stalled watcher's stream ended without a RESYNC")
		}
	case <-time.After(10 * time.Second):
		resp.Body.Close()
		<-found
		t.Fatalf("stalled watcher got no RESYNC after %d events", 2*n)
	}

	// The server went on serving; a new watcher gets what follows, and can
	// resume from a revision to miss nothing.
	l, err := c.Acquire(ctx, "fresh/1")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	rpc := fencedv1connect.NewLeaseServiceClient(http.DefaultClient, srv.URL)
	stream, err := rpc.Watch(ctx, connect.NewRequest(&fencedv1.WatchRequest{Prefix: "fresh/", AfterRevision: l.Token() - 1}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() || stream.Msg().GetEvent().GetType() != fencedv1.Event_ACQUIRED || stream.Msg().GetEvent().GetLease().GetToken() != l.Token() {
		t.Fatalf("new watcher: %v %v", stream.Msg(), stream.Err())
	}
}

// openStalledWatcher opens a Watch of every key whose stream nobody reads,
// over HTTP/2 with small flow-control windows, so the server can only send a
// few kilobytes before the reader holds it up. The server sends response
// headers with the first event, so the request runs in the background.
func openStalledWatcher(t testing.TB, ctx context.Context, url string) <-chan *http.Response {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/fenced.v1.LeaseService/Watch",
		strings.NewReader("\x00\x00\x00\x00\x02{}"))
	req.Header.Set("Content-Type", "application/connect+json")
	protocols := new(http.Protocols)
	protocols.SetUnencryptedHTTP2(true)
	h2c := &http.Client{Transport: &http.Transport{Protocols: protocols, HTTP2: &http.HTTP2Config{
		MaxReceiveBufferPerStream: 64 << 10, MaxReceiveBufferPerConnection: 64 << 10,
	}}}
	stalled := make(chan *http.Response, 1)
	go func() {
		resp, err := h2c.Do(req)
		if err != nil {
			if ctx.Err() == nil {
				t.Error(err)
			}
			close(stalled)
			return
		}
		stalled <- resp
	}()
	return stalled
}

// BenchmarkAcquireRelease compares grants with no watcher and with a
// watcher that never reads: the ratio should be about 1.
func BenchmarkAcquireRelease(b *testing.B) {
	for _, stalled := range []bool{false, true} {
		name := "no-watcher"
		if stalled {
			name = "stalled-watcher"
		}
		b.Run(name, func(b *testing.B) {
			cfg := fencedtest.Config(b)
			cfg.WatchBuffer = 16
			srv := fencedtest.StartConfig(b, cfg)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if stalled {
				openStalledWatcher(b, ctx, srv.URL)
			}
			c := srv.Client(b, client.Config{TTL: 5 * time.Second})
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				l, err := c.Acquire(ctx, fmt.Sprintf("bench/%d", i%64))
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkAcquireReleaseParallel runs acquire+release cycles from 64
// clients at once, each with its own client and key, as the bench harness
// does: the figure that group commit, the transports and the GC settle.
// cpu-ns/op is the CPU time of the whole process (server and clients) per
// cycle, which work off the critical path adds to even when the time per
// cycle does not show it.
func BenchmarkAcquireReleaseParallel(b *testing.B) {
	srv := fencedtest.Start(b)
	var next atomic.Int64
	b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
	cpu := testutil.ProcessCPU()
	defer func() { b.ReportMetric(float64(testutil.ProcessCPU()-cpu)/float64(b.N), "cpu-ns/op") }()
	b.RunParallel(func(pb *testing.PB) {
		id := next.Add(1)
		c := srv.Client(b, client.Config{TTL: 5 * time.Second})
		defer c.CloseIdleConnections()
		key := fmt.Sprintf("bench/%d", id)
		for pb.Next() {
			l, err := c.Acquire(context.Background(), key)
			if err != nil {
				b.Error(err)
				return
			}
			if err := l.Release(context.Background()); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkSessionAcquireRelease runs acquire+release cycles from 1 and
// from 64 clients at once, each with its own connection and key, as unary
// calls and as messages on one Session stream per client, both through
// the bare generated client (no client library on top): benchstat -col
// /transport compares the two. cpu-ns/op is the CPU time of the whole
// process (server and clients) per cycle.
func BenchmarkSessionAcquireRelease(b *testing.B) {
	for _, transport := range []string{"unary", "session"} {
		for _, clients := range []int{1, 64} {
			b.Run(fmt.Sprintf("transport=%s/clients=%d", transport, clients), func(b *testing.B) {
				srv := fencedtest.Start(b)
				cycles := make([]func(i int) error, clients)
				for c := range cycles {
					cycles[c] = newCycler(b, srv.URL, transport, fmt.Sprintf("bench/%d", c))
				}
				var next atomic.Int64
				cpu := testutil.ProcessCPU()
				b.ResetTimer()
				var wg sync.WaitGroup
				for _, cycle := range cycles {
					wg.Go(func() {
						for i := int(next.Add(1)); i <= b.N; i = int(next.Add(1)) {
							if err := cycle(i); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
				b.StopTimer()
				b.ReportMetric(float64(testutil.ProcessCPU()-cpu)/float64(b.N), "cpu-ns/op")
			})
		}
	}
}

// newCycler returns a function that acquires key and releases it, over
// its own h2c connection to base: as two unary calls, or as two calls on
// one Session stream.
func newCycler(b *testing.B, base, transport, key string) func(i int) error {
	protocols := new(http.Protocols)
	protocols.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: protocols}
	b.Cleanup(tr.CloseIdleConnections)
	rpc := fencedv1connect.NewLeaseServiceClient(&http.Client{Transport: tr}, base)
	acq := &fencedv1.AcquireRequest{Key: key, Owner: "bench", TtlMs: 5000}
	if transport == "unary" {
		return func(int) error {
			resp, err := rpc.Acquire(context.Background(), connect.NewRequest(acq))
			if err != nil {
				return err
			}
			_, err = rpc.Release(context.Background(), connect.NewRequest(&fencedv1.ReleaseRequest{Key: key, LeaseId: resp.Msg.GetLease().GetLeaseId()}))
			return err
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	stream := rpc.Session(ctx)
	b.Cleanup(func() { stream.CloseRequest(); stream.CloseResponse() })
	call := func(req *fencedv1.SessionRequest) (*fencedv1.SessionResponse, error) {
		if err := stream.Send(req); err != nil {
			return nil, err
		}
		resp, err := stream.Receive()
		if err != nil {
			return nil, err
		}
		if e := resp.GetError(); e != nil {
			return nil, fmt.Errorf("call %d: %s: %s", req.GetId(), e.GetCode(), e.GetMessage())
		}
		return resp, nil
	}
	return func(i int) error {
		resp, err := call(&fencedv1.SessionRequest{Id: uint64(2 * i), Call: &fencedv1.SessionRequest_Acquire{Acquire: acq}})
		if err != nil {
			return err
		}
		_, err = call(&fencedv1.SessionRequest{Id: uint64(2*i + 1), Call: &fencedv1.SessionRequest_Release{
			Release: &fencedv1.ReleaseRequest{Key: key, LeaseId: resp.GetAcquire().GetLease().GetLeaseId()}}})
		return err
	}
}

// BenchmarkGet runs one client's Gets of a held key over loopback: the
// request path of every call (net/http, fenced's middleware, connect-go,
// the interceptors) with neither raft nor the disk in it, so that its
// cost is not lost in the fsyncs' noise.
func BenchmarkGet(b *testing.B) {
	srv := fencedtest.Start(b)
	c := srv.Client(b, client.Config{TTL: 5 * time.Second})
	ctx := context.Background()
	l, err := c.Acquire(ctx, "bench/get")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Release(ctx)
	for b.Loop() {
		if r, err := c.Get(ctx, "bench/get"); err != nil || r.Lease == nil {
			b.Fatalf("Get: %+v, %v", r, err)
		}
	}
}
