package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
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
	"github.com/fencedio/fenced/internal/testenv"
	"github.com/fencedio/fenced/internal/testutil"
	"github.com/fencedio/fenced/server"
)

// TestAbuseProbe runs one unauthenticated abusive client (from 127.0.0.2)
// against a fenced process with its default limits, scenario by scenario,
// while a well-behaved client (from 127.0.0.1) acquires and releases its
// own key from a process of its own. Each scenario is bounded to seconds.
// It logs the well-behaved client's Acquire p99 and errors, the server's
// resident memory, what the abuser got and which limits refused it; it
// fails when the well-behaved client was not served (any error) or the
// abuser was not held back. The p99 is a figure to read, not asserted:
// the abuser shares the machine's cores with the server and the
// well-behaved client, so it measures the machine as much as the server.
func TestAbuseProbe(t *testing.T) {
	testenv.SkipUnlessLong(t)
	bin := buildFenced(t)
	start := func(t *testing.T, args ...string) *fencedProcess {
		dir := t.TempDir()
		return startFenced(t, bin, filepath.Join(dir, "data"), filepath.Join(dir, "fenced.log"), append([]string{"--log-level", "error"}, args...)...)
	}

	t.Run("waiters", func(t *testing.T) {
		// Waiting acquisitions with distinct owners on one held key, over
		// HTTP/2 (250 streams a connection).
		p := start(t)
		if _, err := clientFrom("127.0.0.3", p.url, false).Acquire(context.Background(),
			connect.NewRequest(&fencedv1.AcquireRequest{Key: "held", Owner: "holder", TtlMs: 600_000})); err != nil {
			t.Fatal(err)
		}
		const n = 20_000
		base := residentMiB(p)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		good := runWellBehaved(t, p.url)
		abuser := clientFrom("127.0.0.2", p.url, true)
		var refused, other atomic.Int64
		var otherErr atomic.Value
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				_, err := abuser.Acquire(ctx, connect.NewRequest(&fencedv1.AcquireRequest{Key: "held", Owner: fmt.Sprint("abuser-", i), TtlMs: 60_000, WaitMs: 600_000}))
				switch {
				case connect.CodeOf(err) == connect.CodeResourceExhausted:
					refused.Add(1)
				case ctx.Err() == nil:
					other.Add(1)
					otherErr.Store(err)
				}
			})
		}
		// Until every acquisition waits or was refused, at most 30 s.
		var waiting int
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			st, err := fetchStats(p.url)
			if err == nil {
				waiting = st.Waiters
			}
			if waiting+int(refused.Load()+other.Load()) >= n {
				break
			}
		}
		ramp := good.stop(t)
		// Then while the abuser's waiters are in place.
		good = runWellBehaved(t, p.url)
		time.Sleep(5 * time.Second)
		res := good.stop(t)
		rss := residentMiB(p)
		t.Logf("%d waiters sent: %d waiting, %d refused (resource_exhausted), %d other errors (last: %v); server RSS %d MiB (%d before: %.1f KiB a waiter); refusals by limit: %v",
			n, waiting, refused.Load(), other.Load(), otherErr.Load(), rss, base, float64((rss-base)<<10)/float64(max(waiting, 1)), limitRefusals(p.url))
		t.Logf("well-behaved while the %d arrive: %v", n, ramp)
		t.Logf("well-behaved while they wait: %v", res)
		cancel()
		wg.Wait()
		res.check(t)
		if refused.Load() == 0 {
			t.Errorf("no waiter of %d from one address refused", n)
		}
	})

	t.Run("calls", func(t *testing.T) {
		// One address holds more calls in progress than it may, their
		// bodies never sent, then sends Gets over HTTP/2 as fast as 64
		// goroutines can for 5 s.
		p := start(t)
		const stalled = server.DefaultMaxCallsPerClient + 44
		var refused atomic.Int64
		for range stalled {
			c, br := dialFrom(t, "127.0.0.2", p.url)
			fmt.Fprint(c, "POST /fenced.v1.LeaseService/Get HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
			go func() {
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					return // in progress until the connection closes
				}
				body, _ := io.ReadAll(resp.Body)
				if resp.StatusCode == http.StatusTooManyRequests && strings.Contains(string(body), "max-calls-per-client") {
					refused.Add(1)
				}
			}()
		}
		testutil.Eventually(t, 10*time.Second, func() error {
			if n := refused.Load(); n != stalled-server.DefaultMaxCallsPerClient {
				return fmt.Errorf("%d of %d calls in progress from one address refused naming max-calls-per-client, want %d",
					n, stalled, stalled-server.DefaultMaxCallsPerClient)
			}
			return nil
		})
		good := runWellBehaved(t, p.url)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		abuser := clientFrom("127.0.0.2", p.url, true)
		var sent, floodRefused atomic.Int64
		var otherErr atomic.Value
		var wg sync.WaitGroup
		for range 64 {
			wg.Go(func() {
				for ctx.Err() == nil {
					_, err := abuser.Get(ctx, connect.NewRequest(&fencedv1.GetRequest{Key: "k"}))
					if ctx.Err() != nil {
						return
					}
					sent.Add(1)
					if connect.CodeOf(err) == connect.CodeResourceExhausted && strings.Contains(err.Error(), "max-calls-per-client") {
						floodRefused.Add(1)
					} else {
						otherErr.Store(fmt.Sprint(err))
					}
				}
			})
		}
		wg.Wait()
		res := good.stop(t)
		t.Logf("%d calls in progress from one address, %d refused; then %d Gets in 5 s, %d refused naming max-calls-per-client; server RSS %d MiB; well-behaved: %v",
			stalled, refused.Load(), sent.Load(), floodRefused.Load(), residentMiB(p), res)
		res.check(t)
		if sent.Load() == 0 || floodRefused.Load() != sent.Load() {
			t.Errorf("with every call slot of its address taken, %d of %d Gets refused naming max-calls-per-client (another answer: %v)",
				floodRefused.Load(), sent.Load(), otherErr.Load())
		}
	})

	t.Run("connections", func(t *testing.T) {
		// One address opens more connections than the server takes, each
		// past its first request, and keeps them.
		p := start(t, "--max-conns", "1000")
		const n = 1200
		addr := strings.TrimPrefix(p.url, "http://")
		var answered, closed, unanswered, dialErrs atomic.Int64
		var conns []net.Conn
		var mu sync.Mutex
		var wg sync.WaitGroup
		next := make(chan struct{}, n)
		for range n {
			next <- struct{}{}
		}
		close(next)
		for range 16 {
			wg.Go(func() {
				for range next {
					c, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}, Timeout: 5 * time.Second}).Dial("tcp", addr)
					if err != nil {
						dialErrs.Add(1)
						continue
					}
					mu.Lock()
					conns = append(conns, c)
					mu.Unlock()
					fmt.Fprint(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
					c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
					resp, err := http.ReadResponse(bufio.NewReader(c), nil)
					switch {
					case errors.Is(err, os.ErrDeadlineExceeded):
						unanswered.Add(1)
					case err != nil:
						closed.Add(1)
					default:
						resp.Body.Close()
						answered.Add(1)
					}
				}
			})
		}
		wg.Wait()
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		good := runWellBehaved(t, p.url)
		time.Sleep(3 * time.Second) // the well-behaved client's sample
		res := good.stop(t)
		t.Logf("%d connections from one address: %d answered, %d closed by the server, %d waiting unanswered, %d not established; well-behaved: %v",
			n, answered.Load(), closed.Load(), unanswered.Load(), dialErrs.Load(), res)
		res.check(t)
	})

	t.Run("body timeout", func(t *testing.T) {
		// A unary call that promises 100 bytes and sends 10: after the
		// 504, how long does the connection stay open?
		p := start(t, "--body-read-timeout", "1s")
		c, br := dialFrom(t, "127.0.0.2", p.url)
		fmt.Fprint(c, "POST /fenced.v1.LeaseService/Get HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"key\":\"a")
		sent := time.Now()
		status, open := answerThenOpen(c, br, 10*time.Second)
		t.Logf("slow body: answered %q after %v; connection open %v after the answer", status, time.Since(sent).Round(time.Millisecond), open)
		if open >= 5*time.Second {
			t.Errorf("the connection stayed open %v after the answer to a slow body", open)
		}
	})

	t.Run("huge claim", func(t *testing.T) {
		// A silent HTTP/1.1 Connect stream whose first message claims 2 GiB.
		p := start(t)
		c, br := dialFrom(t, "127.0.0.2", p.url)
		fmt.Fprint(c, "POST /fenced.v1.LeaseService/Watch HTTP/1.1\r\nHost: x\r\nContent-Type: application/connect+json\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n\x00\x80\x00\x00\x00\r\n")
		sent := time.Now()
		status, open := answerThenOpen(c, br, 10*time.Second)
		took := time.Since(sent) - open
		t.Logf("2 GiB claim: answered %q after %v; connection open %v after the answer", status, took.Round(time.Millisecond), open)
		if status == "" || took > 5*time.Second || open >= 5*time.Second {
			t.Errorf("a chunked 2 GiB claim: answer %q after %v, connection open %v after it", status, took, open)
		}
	})

	t.Run("leases", func(t *testing.T) {
		// One address acquires distinct keys under distinct owners for
		// 15 s, against a cap of 20,000 leases (the default 2,000,000 takes
		// minutes to fill).
		p := start(t, "--max-leases", "20000")
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		abuser := clientFrom("127.0.0.2", p.url, false)
		var granted, refused atomic.Int64
		var wg sync.WaitGroup
		for w := range 16 {
			wg.Go(func() {
				for i := 0; ctx.Err() == nil; i++ {
					_, err := abuser.Acquire(ctx, connect.NewRequest(&fencedv1.AcquireRequest{
						Key: fmt.Sprintf("abuse/%d/%d", w, i), Owner: fmt.Sprintf("o-%d-%d", w, i), TtlMs: 3_600_000}))
					switch {
					case err == nil:
						granted.Add(1)
					case connect.CodeOf(err) == connect.CodeResourceExhausted:
						refused.Add(1)
					}
				}
			})
		}
		// The well-behaved client once the abuser has had 10 s.
		time.Sleep(10 * time.Second)
		good := runWellBehaved(t, p.url)
		wg.Wait()
		res := good.stop(t)
		t.Logf("leases: abuser granted %d, refused %d; server RSS %d MiB; refusals by limit: %v; well-behaved: %v",
			granted.Load(), refused.Load(), residentMiB(p), limitRefusals(p.url), res)
		res.check(t)
	})

	t.Run("store bodies", func(t *testing.T) {
		// PUTs of 1 MiB that send all but their last byte, then stall.
		dir := t.TempDir()
		addr := testutil.MustFreeAddr(t)
		cmd := exec.Command(bin, "store", "--data-dir", dir, "--listen", addr, "--log-level", "error")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		testutil.Eventually(t, 30*time.Second, func() error {
			resp, err := http.Get("http://" + addr + "/healthz")
			if err == nil {
				resp.Body.Close()
			}
			return err
		})
		const n = 96
		body := strings.Repeat("x", 1<<20-1)
		var refused atomic.Int64
		var wg sync.WaitGroup
		var mu sync.Mutex
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for i := range n {
			wg.Go(func() {
				c, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}).Dial("tcp", addr)
				if err != nil {
					return
				}
				mu.Lock()
				conns = append(conns, c) // held until the end
				mu.Unlock()
				br := bufio.NewReader(c)
				fmt.Fprintf(c, "PUT /v1/objects/big%d HTTP/1.1\r\nHost: x\r\nFencing-Scope: s\r\nFencing-Token: 1\r\nContent-Length: %d\r\n\r\n%s", i, 1<<20, body)
				c.SetReadDeadline(time.Now().Add(5 * time.Second))
				if resp, err := http.ReadResponse(br, nil); err == nil && resp.StatusCode == http.StatusServiceUnavailable {
					refused.Add(1)
				}
			})
		}
		wg.Wait()
		put := func() (time.Duration, error) {
			req, _ := http.NewRequest("PUT", "http://"+addr+"/v1/objects/good", strings.NewReader("v"))
			req.Header.Set("Fencing-Scope", "good")
			req.Header.Set("Fencing-Token", "1")
			start := time.Now()
			resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
			if err != nil {
				return 0, err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusNoContent {
				return 0, fmt.Errorf("PUT: %s", resp.Status)
			}
			return time.Since(start), nil
		}
		took, err := put()
		rss := residentMiB(&fencedProcess{cmd: cmd})
		// The cap bounds memory, not who gets it: the stalled PUTs hold it
		// until the body read timeout (30 s) cuts them.
		t.Logf("%d stalled 1 MiB PUTs: %d refused (503); store RSS %d MiB; a well-behaved PUT meanwhile: %v %v", n, refused.Load(), rss, took, err)
		if rss > 64 || err != nil {
			t.Errorf("store RSS %d MiB with %d stalled PUTs (the cap is 32 MiB); a well-behaved PUT: %v", rss, n, err)
		}
	})
}

// limitRefusals lists the limits that refused something on the server at
// url, with their counts (fenced_limit_refusals_total).
func limitRefusals(url string) string {
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	var counts []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), `fenced_limit_refusals_total{limit="`); ok && !strings.HasSuffix(v, " 0") {
			counts = append(counts, strings.Replace(v, `"} `, " ", 1))
		}
	}
	return strings.Join(counts, ", ")
}

// clientFrom is a lease API client from the loopback address ip, over
// HTTP/2 without TLS (h2) or HTTP/1.1.
func clientFrom(ip, url string, h2 bool) fencedv1connect.LeaseServiceClient {
	tr := &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}).DialContext, MaxIdleConnsPerHost: 64}
	if h2 {
		tr.Protocols = new(http.Protocols)
		tr.Protocols.SetUnencryptedHTTP2(true)
	}
	return fencedv1connect.NewLeaseServiceClient(&http.Client{Transport: tr}, url)
}

// dialFrom opens a connection to url's host from the loopback address ip.
func dialFrom(t *testing.T, ip, url string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}).Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

// answerThenOpen reads one answer on c, within d, and returns its status
// line ("" if none came) and how long the connection then stayed open
// (d when it did not close).
func answerThenOpen(c net.Conn, br *bufio.Reader, d time.Duration) (string, time.Duration) {
	c.SetReadDeadline(time.Now().Add(d))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return "", 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	answered := time.Now()
	c.SetReadDeadline(answered.Add(d))
	if _, err := br.ReadByte(); errors.Is(err, os.ErrDeadlineExceeded) {
		return resp.Status, d
	}
	return resp.Status, time.Since(answered)
}

// residentMiB is p's resident memory in MiB, 0 where /proc does not say.
func residentMiB(p *fencedProcess) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return kb >> 10
		}
	}
	return 0
}

// wellBehaved acquires and releases a key in a loop from 127.0.0.1, each
// call with a 5 s timeout, and keeps the latency of every Acquire. It runs
// in a process of its own (this test binary, with wellBehavedEnv set):
// beside the abuser's thousands of goroutines in the test's process, its
// latency would be mostly the wait for its own turn on the test's
// threads. Its address differs from the abuser's, as the per-address
// limits require: a client behind the abuser's address (one NAT or proxy)
// shares its limits, and is refused with it.
type wellBehaved struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   bytes.Buffer
}

type wellBehavedResult struct {
	Acquires int
	P99, Max time.Duration
	Errors   int
	LastErr  string
}

func (r wellBehavedResult) String() string {
	s := fmt.Sprintf("%d acquires, p99 %v, max %v, %d errors", r.Acquires, r.P99.Round(time.Microsecond*100), r.Max.Round(time.Microsecond*100), r.Errors)
	if r.LastErr != "" {
		s += fmt.Sprintf(" (last: %v)", r.LastErr)
	}
	return s
}

// check asserts that the well-behaved client was served: every call
// answered, none refused. Its latency is logged as a figure, not asserted:
// speed is measured in benchmarks, and this probe runs beside other work
// (and under the race detector in CI).
func (r wellBehavedResult) check(t *testing.T) {
	t.Helper()
	if r.Acquires == 0 || r.Errors > 0 {
		t.Errorf("the well-behaved client was not served: %v", r)
	}
}

// wellBehavedEnv, set to a fenced URL, makes this test binary run the
// well-behaved client against it until its standard input closes, then
// print its wellBehavedResult as JSON.
const wellBehavedEnv = "FENCED_TEST_WELL_BEHAVED_CLIENT"

// wellBehavedFromEnv names the loopback address the well-behaved client
// sends from; default the system's choice (127.0.0.1).
const wellBehavedFromEnv = "FENCED_TEST_WELL_BEHAVED_FROM"

func runWellBehaved(t *testing.T, url string) *wellBehaved {
	t.Helper()
	return runWellBehavedFrom(t, url, "")
}

// runWellBehavedFrom runs the well-behaved client from the address ip
// ("" for the system's choice).
func runWellBehavedFrom(t *testing.T, url, ip string) *wellBehaved {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	g := &wellBehaved{cmd: exec.Command(exe)}
	g.cmd.Env = append(os.Environ(), wellBehavedEnv+"="+url, wellBehavedFromEnv+"="+ip)
	g.cmd.Stdout, g.cmd.Stderr = &g.out, os.Stderr
	if g.stdin, err = g.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := g.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.cmd.Process.Kill(); g.cmd.Wait() })
	return g
}

func (g *wellBehaved) stop(t *testing.T) wellBehavedResult {
	t.Helper()
	g.stdin.Close()
	var res wellBehavedResult
	if err := g.cmd.Wait(); err != nil {
		t.Fatalf("the well-behaved client: %v", err)
	}
	if err := json.Unmarshal(g.out.Bytes(), &res); err != nil {
		t.Fatalf("the well-behaved client's result %q: %v", g.out.Bytes(), err)
	}
	return res
}

// wellBehavedMain is the well-behaved client's process.
func wellBehavedMain(url string) {
	tr := &http.Transport{}
	if ip := os.Getenv(wellBehavedFromEnv); ip != "" {
		tr.DialContext = (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}).DialContext
	}
	c := fencedv1connect.NewLeaseServiceClient(&http.Client{Transport: tr, Timeout: 5 * time.Second}, url)
	var stopped atomic.Bool
	go func() {
		io.Copy(io.Discard, os.Stdin)
		stopped.Store(true)
	}()
	var lat []time.Duration
	var res wellBehavedResult
	for i := 0; !stopped.Load(); i++ {
		start := time.Now()
		// A key of its own each time: an Acquire that timed out may
		// still have been granted.
		key := fmt.Sprint("good/", i)
		resp, err := c.Acquire(context.Background(), connect.NewRequest(&fencedv1.AcquireRequest{Key: key, Owner: "good", TtlMs: 10_000}))
		if err != nil {
			res.Errors++
			res.LastErr = err.Error()
			time.Sleep(100 * time.Millisecond) // do not spin on a refusal
			continue
		}
		lat = append(lat, time.Since(start))
		if _, err := c.Release(context.Background(), connect.NewRequest(&fencedv1.ReleaseRequest{Key: key, LeaseId: resp.Msg.GetLease().GetLeaseId()})); err != nil {
			res.Errors++
			res.LastErr = err.Error()
		}
	}
	slices.Sort(lat)
	res.Acquires = len(lat)
	if len(lat) > 0 {
		res.P99, res.Max = lat[len(lat)*99/100], lat[len(lat)-1]
	}
	json.NewEncoder(os.Stdout).Encode(res)
}
