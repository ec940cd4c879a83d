package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/api/fenced/v1/fencedv1connect"
	"github.com/fencedio/fenced/internal/httplimit"
	"github.com/fencedio/fenced/internal/testenv"
	"github.com/fencedio/fenced/lease"
)

// TestAbuseSlowBodies has one address (127.0.0.2) open 500 unary calls
// (Acquire) whose bodies promise 4 KiB and arrive one byte every 300 ms,
// over HTTP/1.1 and over HTTP/2 without TLS, while a well-behaved client
// acquires and releases beside them. Every read of such a body makes
// progress, so only a deadline on the whole body, not one per read, ends
// it. It logs how many calls are still open at the body timeout plus a
// margin and fails when any is: over HTTP/1.1 a call is open until its
// connection closes; over HTTP/2, until its stream is answered (the
// connection, idle once its stream ended, is IdleTimeout's). The default
// timeout is probed too, with the same mechanism and half the calls on
// each protocol.
func TestAbuseSlowBodies(t *testing.T) {
	testenv.SkipUnlessLong(t)
	bin := buildFenced(t)
	start := func(t *testing.T, args ...string) *fencedProcess {
		dir := t.TempDir()
		return startFenced(t, bin, filepath.Join(dir, "data"), filepath.Join(dir, "fenced.log"), append([]string{"--log-level", "error"}, args...)...)
	}
	const short = 5 * time.Second
	t.Run("HTTP/1.1", func(t *testing.T) {
		p := start(t, "--body-read-timeout", short.String())
		probeSlowBodies(t, p, short, 500, 0)
	})
	t.Run("h2c", func(t *testing.T) {
		p := start(t, "--body-read-timeout", short.String())
		probeSlowBodies(t, p, short, 0, 500)
	})
	t.Run("default timeout", func(t *testing.T) {
		p := start(t)
		probeSlowBodies(t, p, httplimit.DefaultBodyTimeout, 250, 250)
	})
}

// slowCall is one trickled call: when it started and when it ended
// (0 while open), and the status of its answer (0 if none came).
type slowCall struct {
	h2      bool
	started time.Time
	ended   atomic.Int64 // unix nanoseconds
	status  atomic.Int32
}

func (s *slowCall) end() { s.ended.CompareAndSwap(0, time.Now().UnixNano()) }

func (s *slowCall) open() bool { return s.ended.Load() == 0 }

// slowBody is the body a slow call promises: a valid Acquire padded with
// spaces to 4 KiB, below both the server's body limit (64 KiB) and the
// 256 KiB net/http reads of an unread body to keep a connection.
var slowBody = `{"key":"slow","owner":"slow","ttlMs":60000}` + strings.Repeat(" ", 4096-43)

// trickleEvery is the pace of a slow body: each read makes progress.
const trickleEvery = 300 * time.Millisecond

// probeSlowBodies opens h1 HTTP/1.1 and h2 h2c slow calls to p from
// 127.0.0.2 and checks that none is open timeout plus a margin after it
// started.
func probeSlowBodies(t *testing.T, p *fencedProcess, timeout time.Duration, h1, h2 int) {
	const margin = 3 * time.Second
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	base := residentMiB(p)
	good := runWellBehaved(t, p.url)
	var h2conns atomic.Int64 // h2c connections open
	calls := make([]*slowCall, 0, h1+h2)
	for i := range h1 + h2 {
		s := &slowCall{h2: i >= h1, started: time.Now()}
		calls = append(calls, s)
		if s.h2 {
			wg.Go(func() { slowH2C(ctx, t, p.url, s, &h2conns) })
		} else {
			wg.Go(func() { slowHTTP1(ctx, t, p.url, s) })
		}
	}
	last := calls[len(calls)-1].started
	time.Sleep(time.Until(last.Add(timeout + margin)))
	rss := residentMiB(p)
	res := good.stop(t)
	var open, early int
	statuses := map[int32]int{}
	var took []time.Duration
	for _, s := range calls {
		statuses[s.status.Load()]++
		if s.open() {
			open++
			continue
		}
		d := time.Duration(s.ended.Load() - s.started.UnixNano())
		if d < timeout {
			early++ // refused before its body was read
		}
		took = append(took, d)
	}
	slices.Sort(took)
	var p50, slowest time.Duration
	if len(took) > 0 {
		p50, slowest = took[len(took)/2], took[len(took)-1]
	}
	t.Logf("%d slow bodies (%d HTTP/1.1, %d h2c), body timeout %v: %d still open %v after the last started; %d ended before the timeout; ended after p50 %v, max %v; answers by status (0: none) %v; h2c connections open %d; server RSS %d MiB (%d before); refusals by limit: %v",
		h1+h2, h1, h2, timeout, open, timeout+margin, early, p50.Round(time.Millisecond), slowest.Round(time.Millisecond),
		statuses, h2conns.Load(), rss, base, limitRefusals(p.url))
	t.Logf("well-behaved meanwhile: %v", res)
	res.check(t)
	if open > 0 {
		t.Errorf("%d of %d slow calls still open %v after they started, with a body timeout of %v", open, h1+h2, timeout+margin, timeout)
	}
}

// slowHTTP1 sends s's call on a connection of its own and trickles its body
// until the connection closes or ctx ends. The call ends when the
// connection closes.
func slowHTTP1(ctx context.Context, t *testing.T, url string, s *slowCall) {
	c, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}).DialContext(ctx, "tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Errorf("dial: %v", err)
		s.end()
		return
	}
	defer c.Close()
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n",
		fencedv1connect.LeaseServiceAcquireProcedure, len(slowBody))
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		br := bufio.NewReader(c)
		if resp, err := http.ReadResponse(br, nil); err == nil {
			s.status.Store(int32(resp.StatusCode))
			io.Copy(io.Discard, resp.Body)
		}
		io.Copy(io.Discard, br) // until the server closes
		s.end()
	}()
	tick := time.NewTicker(trickleEvery)
	defer tick.Stop()
	for i := 0; i < len(slowBody); i++ {
		select {
		case <-ctx.Done():
			return
		case <-closed:
			return
		case <-tick.C:
		}
		if _, err := c.Write([]byte{slowBody[i]}); err != nil {
			<-closed
			return
		}
	}
}

// slowH2C sends s's call over an HTTP/2 connection of its own (h2c) with
// a trickled body. The call ends when its answer has been read.
func slowH2C(ctx context.Context, t *testing.T, url string, s *slowCall, conns *atomic.Int64) {
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dialer.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		conns.Add(1)
		return &countedConn{Conn: c, open: conns}, nil
	}}
	tr.Protocols = new(http.Protocols)
	tr.Protocols.SetUnencryptedHTTP2(true)
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, "POST", url+fencedv1connect.LeaseServiceAcquireProcedure, &trickle{ctx: ctx, rest: slowBody})
	if err != nil {
		t.Error(err)
		return
	}
	req.ContentLength = int64(len(slowBody))
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		if ctx.Err() == nil {
			s.end() // the stream was reset unanswered
		}
		return
	}
	s.status.Store(int32(resp.StatusCode))
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	s.end()
	<-ctx.Done() // keep the connection until the probe ends
}

// trickle is a body that yields one byte every trickleEvery until ctx ends.
type trickle struct {
	ctx  context.Context
	rest string
}

func (b *trickle) Read(p []byte) (int, error) {
	if b.rest == "" {
		return 0, io.EOF
	}
	select {
	case <-b.ctx.Done():
		return 0, b.ctx.Err()
	case <-time.After(trickleEvery):
	}
	n := copy(p[:1], b.rest)
	b.rest = b.rest[n:]
	return n, nil
}

// countedConn counts itself out of open once the server closes it (a read
// fails) or the client does.
type countedConn struct {
	net.Conn
	open *atomic.Int64
	once sync.Once
}

func (c *countedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil {
		c.once.Do(func() { c.open.Add(-1) })
	}
	return n, err
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.open.Add(-1) })
	return c.Conn.Close()
}

// TestAbuseLeaseBytes measures what a lease of the largest key (512 bytes)
// and owner (256 bytes) costs a fenced process: its live heap (after a
// collection) and resident memory, before and after 100,000 of them,
// each under an owner of its own. It fails when lease.Cost, what
// --max-lease-bytes counts, is below the live heap a lease takes. Then,
// with --max-lease-bytes 64MiB, one address acquires such leases until
// refused: it fails unless the refusal is resource_exhausted naming
// max-lease-bytes and comes before the leases' live heap exceeds the
// budget.
func TestAbuseLeaseBytes(t *testing.T) {
	testenv.SkipUnlessLong(t)
	bin := buildFenced(t)
	start := func(t *testing.T, args ...string) *fencedProcess {
		dir := t.TempDir()
		return startFenced(t, bin, filepath.Join(dir, "data"), filepath.Join(dir, "fenced.log"), append([]string{"--log-level", "error", "--pprof"}, args...)...)
	}
	cost := lease.Cost(maxKey(0), maxOwner(0))
	t.Run("bytes per lease", func(t *testing.T) {
		p := start(t)
		heap0, rss0 := liveHeapOf(t, p), residentMiB(p)
		const n = 100_000
		granted, err := acquireMaxLeases(p.url, n)
		if granted != n {
			t.Fatalf("%d of %d leases granted: %v", granted, n, err)
		}
		heap1, rss1 := liveHeapOf(t, p), residentMiB(p)
		perHeap := float64(heap1-heap0) / n
		t.Logf("%d leases, 512-byte keys, 256-byte owners: live heap %d -> %d MiB (%.0f B a lease), RSS %d -> %d MiB (%.0f B a lease); counted %d B a lease",
			n, heap0>>20, heap1>>20, perHeap, rss0, rss1, float64((rss1-rss0)<<20)/n, cost)
		if perHeap > float64(cost) {
			t.Errorf("a lease takes %.0f B of live heap, more than the %d B --max-lease-bytes counts", perHeap, cost)
		}
	})
	t.Run("budget", func(t *testing.T) {
		const budget = 64 << 20
		p := start(t, "--max-lease-bytes", "64MiB")
		heap0, rss0 := liveHeapOf(t, p), residentMiB(p)
		granted, err := acquireMaxLeases(p.url, budget/int(cost)*2)
		heap1, rss1 := liveHeapOf(t, p), residentMiB(p)
		t.Logf("budget 64 MiB: %d leases granted (%d B counted), then %v; live heap %d -> %d MiB, RSS %d -> %d MiB; refusals by limit: %v",
			granted, int64(granted)*cost, err, heap0>>20, heap1>>20, rss0, rss1, limitRefusals(p.url))
		if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "max-lease-bytes") {
			t.Errorf("the refusal: %v, want resource_exhausted naming max-lease-bytes", err)
		}
		if heap1-heap0 > budget {
			t.Errorf("the leases took %d MiB of live heap, over the budget of 64 MiB", (heap1-heap0)>>20)
		}
		if int64(granted)*cost > budget+leaseWorkers*cost {
			t.Errorf("%d leases of %d B granted: over the budget by more than the %d acquisitions in flight", granted, cost, leaseWorkers)
		}
	})
}

// maxKey and maxOwner are the i-th key and owner of the largest sizes
// accepted.
func maxKey(i int) string   { return fmt.Sprintf("bytes/%08d/", i) + strings.Repeat("k", 512-15) }
func maxOwner(i int) string { return fmt.Sprintf("o/%08d/", i) + strings.Repeat("o", 256-11) }

const leaseWorkers = 32

// acquireMaxLeases acquires up to n leases of maxKey and maxOwner from
// 127.0.0.2, leaseWorkers at a time, until one is refused, and returns how
// many were granted and the first error.
func acquireMaxLeases(url string, n int) (int, error) {
	c := clientFrom("127.0.0.2", url, true)
	var next, granted atomic.Int64
	var first atomic.Value
	var wg sync.WaitGroup
	for range leaseWorkers {
		wg.Go(func() {
			for first.Load() == nil {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				_, err := c.Acquire(context.Background(), connect.NewRequest(&fencedv1.AcquireRequest{Key: maxKey(i), Owner: maxOwner(i), TtlMs: 3_600_000}))
				if err != nil {
					first.CompareAndSwap(nil, err)
					return
				}
				granted.Add(1)
			}
		})
	}
	wg.Wait()
	err, _ := first.Load().(error)
	return int(granted.Load()), err
}

// liveHeapOf is p's live heap in bytes after a collection, from its heap
// profile (--pprof).
func liveHeapOf(t *testing.T, p *fencedProcess) int64 {
	t.Helper()
	resp, err := http.Get(p.url + "/debug/pprof/heap?debug=1&gc=1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "# HeapAlloc = "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no HeapAlloc in the heap profile: %v", sc.Err())
	return 0
}
