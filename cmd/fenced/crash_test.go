package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
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
)

// TestCrashRecovery kills the fenced binary with SIGKILL while acquisitions
// are in flight, restarts it on the same data directory, and checks that
// nothing acknowledged was lost: acknowledged leases are still current with
// their token and renew with their id, and every later grant of a key carries a larger token
// than every grant of it acknowledged before (invariants I1 and I3).
func TestCrashRecovery(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and crashes it repeatedly")
	}
	testenv.SkipUnlessLong(t)
	bin := buildFenced(t)
	dataDir := filepath.Join(t.TempDir(), "data")
	logDir := t.TempDir()
	h := newHistory()
	t.Cleanup(func() {
		if t.Failed() {
			dumpLogs(t, logDir)
		}
	})

	const crashes = 5
	for run := 0; run <= crashes; run++ {
		p := startFenced(t, bin, dataDir, filepath.Join(logDir, fmt.Sprintf("run%d.log", run)))
		c := newClient(p.url)
		if run > 0 {
			verify(t, c, h, run)
		}
		if run == crashes || t.Failed() {
			p.kill(t)
			break
		}
		acquireUntilKilled(t, c, h, p, run)
	}
	h.checkRealTimeOrder(t)
	// The runs above used the WAL, not a bbolt raft.db.
	if _, err := os.Stat(filepath.Join(dataDir, "wal", "wal-meta.db")); err != nil {
		t.Errorf("no WAL in the data dir: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dataDir, "raft.db")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("raft.db in the data dir: %v", err)
	}
	var unknownReleases int
	for _, g := range h.grants {
		if g.releaseUnknown {
			unknownReleases++
		}
	}
	t.Logf("%d grants acknowledged over %d keys, %d crashes; in flight at a crash: %d releases, %d applied but unanswered grants",
		len(h.grants), len(h.keys), crashes, unknownReleases, h.lostAnswers)
}

// TestDataDirInUse: a second fenced process on a data directory in use
// exits non-zero and says why, and leaves the first one serving.
func TestDataDirInUse(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildFenced(t)
	dataDir := filepath.Join(t.TempDir(), "data")
	logDir := t.TempDir()
	p := startFenced(t, bin, dataDir, filepath.Join(logDir, "first.log"))

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "--data-dir", dataDir, "--listen", testutil.MustFreeAddr(t), "--raft-listen", testutil.MustFreeAddr(t)).CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("second fenced on %s: %v, want exit status 1\n%s", dataDir, err, out)
	}
	if want := "data dir " + dataDir + " is in use by another fenced process"; !strings.Contains(string(out), want) {
		t.Errorf("second fenced said %q, want %q", out, want)
	}
	c := newClient(p.url)
	if _, err := c.Acquire(context.Background(), connect.NewRequest(&fencedv1.AcquireRequest{Key: "k", Owner: "o", TtlMs: 60_000})); err != nil {
		t.Errorf("first fenced after the second was refused: %v", err)
	}
	p.kill(t)
}

// grant is one acknowledged acquisition.
type grant struct {
	key, id, owner string
	token          uint64
	sent, acked    time.Time // request sent, answer received
	released       bool      // a release was acknowledged
	releaseUnknown bool      // a release was sent and its answer lost
}

type history struct {
	mu     sync.Mutex
	grants []*grant
	byKey  map[string][]*grant
	keys   map[string]bool // every key ever asked for, granted or not
	// lostAnswers counts leases found current after a crash that no
	// acknowledged grant explains: acquisitions applied but not answered.
	lostAnswers int
	orphans     map[orphanGrant]bool
}

type orphanGrant struct {
	key   string
	token uint64
}

func newHistory() *history {
	return &history{byKey: make(map[string][]*grant), keys: make(map[string]bool), orphans: make(map[orphanGrant]bool)}
}

func (h *history) tried(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.keys[key] = true
}

// acked records a grant and reports a token acknowledged twice for a key.
func (h *history) acked(g *grant) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, o := range h.byKey[g.key] {
		if o.token == g.token {
			return fmt.Errorf("token %d of %q acknowledged twice (lease ids %s, %s)", g.token, g.key, o.id, g.id)
		}
		if o.id == g.id {
			return fmt.Errorf("lease id %s of %q granted twice", g.id, g.key)
		}
	}
	h.grants = append(h.grants, g)
	h.byKey[g.key] = append(h.byKey[g.key], g)
	return nil
}

func (h *history) setReleased(g *grant, released, unknown bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	g.released, g.releaseUnknown = released, unknown
}

// maxToken returns the largest acknowledged token of key.
func (h *history) maxToken(key string) uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	var m uint64
	for _, g := range h.byKey[key] {
		m = max(m, g.token)
	}
	return m
}

// checkRealTimeOrder checks I1 in real time: a grant asked for after another
// grant of the same key was acknowledged has a larger token, whether or not
// a crash happened in between.
func (h *history) checkRealTimeOrder(t *testing.T) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for key, gs := range h.byKey {
		for _, a := range gs {
			for _, b := range gs {
				if b.sent.After(a.acked) && b.token <= a.token {
					t.Errorf("%q: token %d was asked for after token %d was acknowledged", key, b.token, a.token)
				}
			}
		}
	}
}

type fencedProcess struct {
	url    string
	cmd    *exec.Cmd
	exited chan struct{}
	killed atomic.Bool
}

func (p *fencedProcess) kill(t *testing.T) {
	t.Helper()
	p.killed.Store(true)
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Fatalf("kill fenced: %v", err)
	}
	<-p.exited
}

// buildFenced returns the fenced binary the process tests start: this
// test binary itself, which runs fenced's main when asFencedEnv is set
// (TestMain), so no build is needed. Under the race detector, where every
// node would run instrumented and several share two cores, it is a plain
// go build instead, made once per run (TestMain removes it).
func buildFenced(t *testing.T) string {
	t.Helper()
	if !raceEnabled {
		exe, err := os.Executable()
		if err != nil {
			t.Fatalf("the test binary: %v", err)
		}
		return exe
	}
	built.once.Do(func() {
		goTool, err := exec.LookPath("go")
		if err != nil {
			built.skip = fmt.Sprintf("no go tool to build the binary: %v", err)
			return
		}
		if built.dir, err = os.MkdirTemp("", "fenced-test-bin"); err != nil {
			built.err = err
			return
		}
		built.bin = filepath.Join(built.dir, "fenced")
		if out, err := exec.Command(goTool, "build", "-o", built.bin, ".").CombinedOutput(); err != nil {
			built.err = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if built.skip != "" {
		t.Skip(built.skip)
	}
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.bin
}

var built struct {
	once           sync.Once
	dir, bin, skip string
	err            error
}

// asFencedEnv set to 1 makes this test binary run fenced's main instead of
// the tests. TestMain sets it for the processes the tests start.
const asFencedEnv = "FENCED_TEST_BINARY_IS_FENCED"

func TestMain(m *testing.M) {
	if url := os.Getenv(wellBehavedEnv); url != "" {
		wellBehavedMain(url)
		os.Exit(0)
	}
	if spec := os.Getenv(floodEnv); spec != "" {
		floodMain(spec)
		os.Exit(0)
	}
	if os.Getenv(asFencedEnv) == "1" {
		main()
		os.Exit(0)
	}
	os.Setenv(asFencedEnv, "1")
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

func startFenced(t *testing.T, bin, dataDir, logPath string, extraArgs ...string) *fencedProcess {
	t.Helper()
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logFile.Close() })
	listen := testutil.MustFreeAddr(t)
	cmd := exec.Command(bin, append([]string{"--data-dir", dataDir, "--listen", listen, "--raft-listen", testutil.MustFreeAddr(t)}, extraArgs...)...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatalf("start fenced: %v", err)
	}
	p := &fencedProcess{url: "http://" + listen, cmd: cmd, exited: make(chan struct{})}
	go func() { cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-p.exited })

	hc := &http.Client{Timeout: time.Second}
	testutil.Eventually(t, 30*time.Second, func() error {
		select {
		case <-p.exited:
			t.Fatalf("fenced exited before serving: %v", cmd.ProcessState)
		default:
		}
		resp, err := hc.Get(p.url + "/healthz")
		if err != nil {
			return fmt.Errorf("fenced not healthy: %w", err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("fenced not healthy: /healthz answered %s", resp.Status)
		}
		return nil
	})
	return p
}

func newClient(url string) fencedv1connect.LeaseServiceClient {
	return fencedv1connect.NewLeaseServiceClient(&http.Client{Transport: &http.Transport{}, Timeout: 10 * time.Second}, url)
}

// acquireUntilKilled runs concurrent acquirers and kills the server with
// SIGKILL once enough grants are acknowledged, while requests are in flight.
func acquireUntilKilled(t *testing.T, c fencedv1connect.LeaseServiceClient, h *history, p *fencedProcess, run int) {
	const (
		workers   = 8
		ownKeys   = 6
		shared    = 4
		killAfter = 40
	)
	var acks atomic.Int64
	enough := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(run), uint64(w)))
			mine := map[string]*grant{}
			owner := fmt.Sprintf("run%d-worker%d", run, w)
			for {
				key := fmt.Sprintf("own/%d/%d", w, rng.IntN(ownKeys))
				if rng.IntN(3) == 0 {
					key = fmt.Sprintf("shared/%d", rng.IntN(shared))
				}
				ctx := context.Background()
				if g, ok := mine[key]; ok {
					_, err := c.Release(ctx, connect.NewRequest(&fencedv1.ReleaseRequest{Key: key, LeaseId: g.id}))
					if err != nil {
						h.setReleased(g, false, true)
						if !p.killed.Load() {
							t.Errorf("release %q %s before the crash: %v", key, g.id, err)
						}
						return
					}
					h.setReleased(g, true, false)
					delete(mine, key)
					continue
				}
				var wait int64
				if w%2 == 1 && key[0] == 's' {
					wait = 100
				}
				h.tried(key)
				sent := time.Now()
				resp, err := c.Acquire(ctx, connect.NewRequest(&fencedv1.AcquireRequest{Key: key, Owner: owner, TtlMs: 60_000, WaitMs: wait}))
				if connect.CodeOf(err) == connect.CodeFailedPrecondition {
					continue
				}
				if err != nil {
					if !p.killed.Load() {
						t.Errorf("acquire %q before the crash: %v", key, err)
					}
					return
				}
				l := resp.Msg.GetLease()
				g := &grant{key: key, id: l.GetLeaseId(), owner: l.GetOwner(), token: l.GetToken(), sent: sent, acked: time.Now()}
				if l.GetKey() != key || l.GetOwner() != owner || g.token == 0 || g.id == "" {
					t.Errorf("acquire %q answered %v", key, l)
				}
				if err := h.acked(g); err != nil {
					t.Error(err)
				}
				mine[key] = g
				if acks.Add(1) >= killAfter {
					once.Do(func() { close(enough) })
				}
			}
		})
	}
	select {
	case <-enough:
	case <-time.After(20 * time.Second):
		t.Errorf("run %d: only %d grants acknowledged in 20s", run, acks.Load())
	}
	p.kill(t)
	wg.Wait()
}

// verify checks the restarted server against everything acknowledged, then
// frees every key and acquires it again.
func verify(t *testing.T, c fencedv1connect.LeaseServiceClient, h *history, run int) {
	t.Helper()
	ctx := context.Background()
	h.mu.Lock()
	keys := make([]string, 0, len(h.keys))
	for k := range h.keys {
		keys = append(keys, k)
	}
	h.mu.Unlock()

	for _, key := range keys {
		resp, err := c.Get(ctx, connect.NewRequest(&fencedv1.GetRequest{Key: key}))
		if err != nil {
			t.Fatalf("run %d: get %q: %v", run, key, err)
		}
		cur, last := resp.Msg.GetLease(), resp.Msg.GetLastToken()
		maxAck := h.maxToken(key)
		if last < maxAck {
			t.Errorf("run %d: %q lastToken %d, below the acknowledged token %d", run, key, last, maxAck)
		}

		h.mu.Lock()
		var held *grant
		for _, g := range h.byKey[key] {
			switch {
			case !g.released && !g.releaseUnknown:
				if held != nil {
					t.Errorf("run %d: %q: two acknowledged, unreleased grants %d and %d", run, key, held.token, g.token)
				}
				held = g
			case g.released && cur != nil && cur.GetToken() == g.token:
				t.Errorf("run %d: %q: lease %s is current again after its release was acknowledged", run, key, g.id)
			}
		}
		h.mu.Unlock()

		// Get shows no lease ID (only the holder sees it): a grant is known
		// by its key and token.
		if cur != nil && cur.GetLeaseId() != "" {
			t.Errorf("run %d: %q: Get shows the lease ID of %v", run, key, cur)
		}
		if held != nil {
			if cur == nil || cur.GetToken() != held.token || cur.GetOwner() != held.owner {
				t.Errorf("run %d: %q: acknowledged lease (id %s token %d) lost after the crash; Get shows %v", run, key, held.id, held.token, cur)
				continue
			}
			r, err := c.Renew(ctx, connect.NewRequest(&fencedv1.RenewRequest{Key: key, LeaseId: held.id}))
			if err != nil || r.Msg.GetLease().GetToken() != held.token {
				t.Errorf("run %d: renew %q after the crash: %v %v", run, key, r, err)
			}
		}
		if cur != nil {
			if cur.GetToken() != last {
				t.Errorf("run %d: %q: current lease %v inconsistent with lastToken %d", run, key, cur, last)
			}
			g := h.grantOf(key, cur.GetToken())
			if g == nil {
				// A grant applied but whose answer was lost in the crash.
				// Nobody has its ID, so it stays until it expires; until
				// then it excludes everyone else.
				if h.orphan(key, cur.GetToken()) {
					h.mu.Lock()
					h.lostAnswers++
					h.mu.Unlock()
				}
				_, err := c.Acquire(ctx, connect.NewRequest(&fencedv1.AcquireRequest{Key: key, Owner: "verifier", TtlMs: 60_000}))
				var ce *connect.Error
				if !errors.As(err, &ce) || ce.Code() != connect.CodeFailedPrecondition {
					t.Errorf("run %d: acquire %q held by an unanswered grant: %v, want failed_precondition", run, key, err)
				}
				continue
			}
			// The acknowledged lease, or one whose release was lost in
			// the crash: free the key with its id.
			if _, err := c.Release(ctx, connect.NewRequest(&fencedv1.ReleaseRequest{Key: key, LeaseId: g.id})); err != nil {
				t.Fatalf("run %d: release %q: %v", run, key, err)
			}
			h.setReleased(g, true, false)
		}

		sent := time.Now()
		a, err := c.Acquire(ctx, connect.NewRequest(&fencedv1.AcquireRequest{Key: key, Owner: "verifier", TtlMs: 60_000}))
		if err != nil {
			t.Fatalf("run %d: acquire %q after freeing it: %v", run, key, err)
		}
		l := a.Msg.GetLease()
		if l.GetToken() <= maxAck || l.GetToken() <= last {
			t.Errorf("run %d: %q: token %d after the crash, not above the acknowledged %d (lastToken %d)", run, key, l.GetToken(), maxAck, last)
		}
		g := &grant{key: key, id: l.GetLeaseId(), owner: "verifier", token: l.GetToken(), sent: sent, acked: time.Now()}
		if err := h.acked(g); err != nil {
			t.Error(err)
		}
		if _, err := c.Release(ctx, connect.NewRequest(&fencedv1.ReleaseRequest{Key: key, LeaseId: g.id})); err != nil {
			t.Fatalf("run %d: release %q: %v", run, key, err)
		}
		h.setReleased(g, true, false)
	}
}

// grantOf returns the acknowledged grant of key with token, if any.
func (h *history) grantOf(key string, token uint64) *grant {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, g := range h.byKey[key] {
		if g.token == token {
			return g
		}
	}
	return nil
}

// orphan records that token of key was granted but never answered, and
// reports whether that is news.
func (h *history) orphan(key string, token uint64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	o := orphanGrant{key, token}
	if h.orphans[o] {
		return false
	}
	h.orphans[o] = true
	return true
}

func dumpLogs(t *testing.T, dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		const tail = 8 << 10
		if len(b) > tail {
			b = b[len(b)-tail:]
		}
		t.Logf("=== %s (last %d bytes)\n%s", e.Name(), len(b), b)
	}
}

// count returns the number of acknowledged grants so far.
func (h *history) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.grants)
}
