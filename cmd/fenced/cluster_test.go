package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/api/fenced/v1/fencedv1connect"
	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/internal/testenv"
	"github.com/fencedio/fenced/internal/testutil"
	"github.com/fencedio/fenced/server"
)

// testCluster is a cluster of fenced processes on loopback ports.
type testCluster struct {
	t      *testing.T
	bin    string
	ic     string // --initial-cluster
	logDir string
	nodes  []*clusterNode
	// http asks the nodes for their roles; nil: plain HTTP.
	http *http.Client
}

type clusterNode struct {
	id, api, raft, dataDir string
	url                    string
	starts                 int
	extraArgs              []string // given on every start
	p                      *fencedProcess
	stopped                bool // SIGSTOPped by the test
}

func newTestCluster(t *testing.T, n int) *testCluster {
	t.Helper()
	c := newStoppedCluster(t, n)
	for i := range c.nodes {
		c.start(i)
	}
	return c
}

// newStoppedCluster is newTestCluster before any node starts.
func newStoppedCluster(t *testing.T, n int) *testCluster {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binary and runs a cluster of processes")
	}
	testenv.SkipUnlessLong(t)
	c := &testCluster{t: t, bin: buildFenced(t), logDir: t.TempDir()}
	var ic []string
	for i := range n {
		nd := &clusterNode{id: fmt.Sprintf("n%d", i+1), api: testutil.MustFreeAddr(t), raft: testutil.MustFreeAddr(t),
			dataDir: filepath.Join(t.TempDir(), "data")}
		nd.url = "http://" + nd.api
		c.nodes = append(c.nodes, nd)
		ic = append(ic, nd.id+"="+nd.raft)
	}
	c.ic = strings.Join(ic, ",")
	t.Cleanup(func() {
		if t.Failed() {
			dumpLogs(t, c.logDir)
		}
	})
	return c
}

// start starts node i, on its data directory, with the same flags every
// time: on a restart the initial cluster must be ignored.
func (c *testCluster) start(i int) {
	t := c.t
	nd := c.nodes[i]
	nd.starts++
	logFile, err := os.Create(filepath.Join(c.logDir, fmt.Sprintf("%s-start%d.log", nd.id, nd.starts)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logFile.Close() })
	cmd := exec.Command(c.bin, "--node-id", nd.id, "--initial-cluster", c.ic,
		"--listen", nd.api, "--data-dir", nd.dataDir, "--log-level", "warn")
	cmd.Args = append(cmd.Args, nd.extraArgs...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", nd.id, err)
	}
	p := &fencedProcess{url: nd.url, cmd: cmd, exited: make(chan struct{})}
	go func() { cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-p.exited })
	nd.p = p
}

func (c *testCluster) alive(i int) bool {
	if c.nodes[i].stopped {
		return false
	}
	select {
	case <-c.nodes[i].p.exited:
		return false
	default:
		return true
	}
}

func (c *testCluster) role(i int) (server.Role, error) {
	hc := c.http
	if hc == nil {
		hc = &http.Client{Timeout: time.Second}
	}
	resp, err := hc.Get(c.nodes[i].url + "/v1/role")
	if err != nil {
		return server.Role{}, err
	}
	defer resp.Body.Close()
	var r server.Role
	return r, json.NewDecoder(resp.Body).Decode(&r)
}

// waitLeader waits until one live node serves as leader and every live node
// knows it; it returns the leader's index.
func (c *testCluster) waitLeader(within time.Duration) int {
	c.t.Helper()
	deadline := time.Now().Add(within)
	for {
		leader, agreed := -1, true
		for i := range c.nodes {
			if !c.alive(i) {
				continue
			}
			r, err := c.role(i)
			if err != nil {
				agreed = false
				break
			}
			if r.Ready {
				leader = i
			}
			if r.LeaderID == "" || (leader >= 0 && r.LeaderID != c.nodes[leader].id) {
				agreed = false
			}
		}
		if leader >= 0 && agreed {
			// Every node must name the ready node.
			ok := true
			for i := range c.nodes {
				if r, err := c.role(i); c.alive(i) && (err != nil || r.LeaderID != c.nodes[leader].id) {
					ok = false
				}
			}
			if ok {
				return leader
			}
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("no leader known to every live node after %v", within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (c *testCluster) urls() []string {
	out := make([]string, len(c.nodes))
	for i, nd := range c.nodes {
		out[i] = nd.url
	}
	return out
}

func (c *testCluster) kill(i int) {
	c.t.Helper()
	c.nodes[i].p.kill(c.t)
}

// TestClusterFormationAndForwarding starts three processes with the same
// --initial-cluster and checks that every call works through every node,
// with the leader's codes, details and deadlines.
func TestClusterFormationAndForwarding(t *testing.T) {
	c := newTestCluster(t, 3)
	leader := c.waitLeader(20 * time.Second)
	ctx := context.Background()
	hc := &http.Client{Timeout: time.Second}
	for i, nd := range c.nodes {
		r, err := c.role(i)
		if err != nil || len(r.Members) != 3 || r.NodeID != nd.id {
			t.Fatalf("%s role: %+v %v", nd.id, r, err)
		}
		resp, err := hc.Get(nd.url + "/healthz")
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Errorf("%s /healthz: %v %v", nd.id, resp, err)
		}
		if resp != nil {
			resp.Body.Close()
		}
	}
	t.Logf("leader %s", c.nodes[leader].id)
	// Every node lists every member's client URL (by default its --listen),
	// as the leader recorded them in the log.
	for i := range c.nodes {
		testutil.Eventually(t, 10*time.Second, func() error {
			r, err := c.role(i)
			if err != nil {
				return err
			}
			for _, m := range r.Members {
				for _, nd := range c.nodes {
					if nd.id == m.ID && m.ClientURL != nd.url {
						return fmt.Errorf("%s lists %s with client URL %q, want %q", c.nodes[i].id, m.ID, m.ClientURL, nd.url)
					}
				}
			}
			return nil
		})
	}

	for i := range c.nodes {
		via := func(k int) string { return c.nodes[(i+k)%3].id }
		rpc := func(k int) fencedv1connect.LeaseServiceClient { return newClient(c.nodes[(i+k)%3].url) }
		key := fmt.Sprintf("k/%d", i)
		a, err := rpc(0).Acquire(ctx, connect.NewRequest(&fencedv1.AcquireRequest{Key: key, Owner: "A", TtlMs: 10_000}))
		if err != nil {
			t.Fatalf("acquire %q via %s: %v", key, via(0), err)
		}
		l := a.Msg.GetLease()
		_, err = rpc(1).Acquire(ctx, connect.NewRequest(&fencedv1.AcquireRequest{Key: key, Owner: "B", TtlMs: 10_000}))
		if connect.CodeOf(err) != connect.CodeFailedPrecondition {
			t.Fatalf("second acquire of %q via %s: %v, want failed_precondition", key, via(1), err)
		}
		var ce *connect.Error
		errors.As(err, &ce)
		var held *fencedv1.LeaseHeld
		for _, d := range ce.Details() {
			if m, derr := d.Value(); derr == nil {
				held, _ = m.(*fencedv1.LeaseHeld)
			}
		}
		if held == nil || held.GetOwner() != "A" || held.GetToken() != l.GetToken() || held.GetRemainingMs() <= 0 {
			t.Errorf("held detail via %s: %v", via(1), held)
		}
		r, err := rpc(2).Renew(ctx, connect.NewRequest(&fencedv1.RenewRequest{Key: key, LeaseId: l.GetLeaseId()}))
		if err != nil || r.Msg.GetLease().GetToken() != l.GetToken() {
			t.Errorf("renew via %s: %v %v", via(2), r, err)
		}
		g, err := rpc(1).Get(ctx, connect.NewRequest(&fencedv1.GetRequest{Key: key}))
		if err != nil || g.Msg.GetLease().GetToken() != l.GetToken() || g.Msg.GetLastToken() != l.GetToken() {
			t.Errorf("get via %s: %v %v", via(1), g, err)
		}
		ls, err := rpc(2).List(ctx, connect.NewRequest(&fencedv1.ListRequest{Prefix: key}))
		if err != nil || len(ls.Msg.GetLeases()) != 1 || ls.Msg.GetLeases()[0].GetToken() != l.GetToken() {
			t.Errorf("list via %s: %v %v", via(2), ls, err)
		}
		// A stale read is answered by the node itself, from its applied
		// state; it may lag, so wait for the grant to reach it.
		stale := connect.NewRequest(&fencedv1.GetRequest{Key: key})
		stale.Header().Set("Fenced-Stale-Read", "true")
		for deadline := time.Now().Add(5 * time.Second); ; {
			sg, err := rpc(2).Get(ctx, stale)
			if err != nil {
				t.Fatalf("stale get via %s: %v", via(2), err)
			}
			if sg.Msg.GetLastToken() == l.GetToken() {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("stale get via %s: lastToken %d, the grant %d never arrived", via(2), sg.Msg.GetLastToken(), l.GetToken())
			}
			time.Sleep(10 * time.Millisecond)
		}
		// KeepAlive needs HTTP/2: the client's streams have it.
		cl, err := client.New(client.Config{Endpoint: c.nodes[(i+1)%3].url})
		if err != nil {
			t.Fatal(err)
		}
		ka := cl.KeepAlive(ctx)
		if info, err := ka.Renew(key, l.GetLeaseId()); err != nil || info.Token != l.GetToken() {
			t.Errorf("keepalive via %s: %v %v", via(1), info, err)
		}
		if _, err := ka.Renew(key, "00000000000000000000000000000000"); !errors.Is(err, client.ErrNotHeld) {
			t.Errorf("keepalive of a wrong id via %s: %v, want ErrNotHeld", via(1), err)
		}
		ka.Close()
		sessionThrough(t, c.nodes[(i+1)%3], key, l)
		if _, err := rpc(1).Release(ctx, connect.NewRequest(&fencedv1.ReleaseRequest{Key: key, LeaseId: l.GetLeaseId()})); err != nil {
			t.Errorf("release via %s: %v", via(1), err)
		}
		_, err = rpc(2).Release(ctx, connect.NewRequest(&fencedv1.ReleaseRequest{Key: key, LeaseId: l.GetLeaseId()}))
		if connect.CodeOf(err) != connect.CodeNotFound {
			t.Errorf("second release via %s: %v, want not_found", via(2), err)
		}
	}

	// The caller's deadline travels with a forwarded call: a wait of 10s
	// cut by a 400ms deadline ends at the deadline.
	follower := (leader + 1) % 3
	f := newClient(c.nodes[follower].url)
	if _, err := f.Acquire(ctx, connect.NewRequest(&fencedv1.AcquireRequest{Key: "held", Owner: "A", TtlMs: 30_000})); err != nil {
		t.Fatal(err)
	}
	dctx, cancel := context.WithTimeout(ctx, 400*time.Millisecond)
	start := time.Now()
	_, err := f.Acquire(dctx, connect.NewRequest(&fencedv1.AcquireRequest{Key: "held", Owner: "B", TtlMs: 30_000, WaitMs: 10_000}))
	cancel()
	// The leader answers "held" as the deadline comes, or the deadline cuts
	// the call first; either way the call ends then, not after 10s.
	if code := connect.CodeOf(err); (code != connect.CodeDeadlineExceeded && code != connect.CodeFailedPrecondition) || time.Since(start) > 3*time.Second {
		t.Errorf("waiting acquire via a follower with a 400ms deadline: %v after %v", err, time.Since(start))
	}

	// Watch on a follower sees what is acquired through another node.
	other := (leader + 2) % 3
	wc, err := client.New(client.Config{Endpoint: c.nodes[follower].url})
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	seen := make(chan client.Event, 64)
	go wc.Watch(wctx, "watched/", 0, func(ev client.Event) error { seen <- ev; return nil })
	// Acquire through another node until the watch, open at some point
	// meanwhile, reports one of the grants with its token.
	granted := map[string]uint64{}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case ev := <-seen:
			if ev.Type != client.Acquired || granted[ev.Lease.Key] != ev.Lease.Token || ev.Revision == 0 {
				t.Fatalf("watch via %s: %+v, granted %v", c.nodes[follower].id, ev, granted)
			}
			return
		case <-tick.C:
		case <-wctx.Done():
			t.Fatalf("watch via %s saw no event of acquisitions through %s", c.nodes[follower].id, c.nodes[other].id)
		}
		key := fmt.Sprintf("watched/%d", i)
		a, err := newClient(c.nodes[other].url).Acquire(ctx, connect.NewRequest(&fencedv1.AcquireRequest{Key: key, Owner: "W", TtlMs: 10_000}))
		if err != nil {
			t.Fatal(err)
		}
		granted[key] = a.Msg.GetLease().GetToken()
	}
}

// TestClusterLeaderKill kills the leader of a 3-node cluster with SIGKILL
// under a steady load of acquisitions through every endpoint.
func TestClusterLeaderKill(t *testing.T) { testLeaderKill(t, 3, 0, false) }

// TestClusterLeaderPause stops the leader of a 3-node cluster with SIGSTOP
// for longer than an election, then lets it go on: the others elect a new
// leader meanwhile, and the old one rejoins as a follower.
func TestClusterLeaderPause(t *testing.T) { testLeaderKill(t, 3, 0, true) }

// TestClusterFiveNodesTwoDown kills the leader and a follower of a 5-node
// cluster at once.
func TestClusterFiveNodesTwoDown(t *testing.T) { testLeaderKill(t, 5, 1, false) }

// testLeaderKill checks that after kill -9 of the leader (and of
// alsoFollowers followers at the same moment) a new leader serves
// acquisitions through every live endpoint; that no acknowledged grant was
// lost and tokens kept increasing per key (I1); that holders with the
// default TTL which keep renewing kept their leases; and that the killed
// nodes rejoin when restarted on their data directories.
func testLeaderKill(t *testing.T, n, alsoFollowers int, pause bool) {
	c := newTestCluster(t, n)
	leader := c.waitLeader(20 * time.Second)
	ctx := context.Background()
	newCl := func(owner string) *client.Client {
		cl, err := client.New(client.Config{Endpoints: c.urls(), Owner: owner, FailoverTimeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}

	// Healthy holders: the default TTL, renewing on their own.
	var holders []*client.Lease
	for i := range 3 {
		l, err := newCl(fmt.Sprintf("holder%d", i)).Acquire(ctx, fmt.Sprintf("held/%d", i))
		if err != nil {
			t.Fatal(err)
		}
		holders = append(holders, l)
	}

	// A watcher that starts at the leader's endpoint must go on at another
	// node after the kill, without repeating or reordering revisions.
	var (
		watchMu      sync.Mutex
		watchRevs    []uint64
		watchBadness []string
		watchSeen    = map[string]bool{}
	)
	wurls := []string{c.nodes[leader].url}
	for i, nd := range c.nodes {
		if i != leader {
			wurls = append(wurls, nd.url)
		}
	}
	wcl, err := client.New(client.Config{Endpoints: wurls, FailoverTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(ctx)
	watchDone := make(chan error, 1)
	go func() {
		watchDone <- wcl.Watch(wctx, "load/", 0, func(ev client.Event) error {
			watchMu.Lock()
			defer watchMu.Unlock()
			if ev.Type == client.Resync {
				watchBadness = append(watchBadness, "resync")
				return nil
			}
			// A handover is two events (freed, acquired) with one revision.
			if n := len(watchRevs); n > 0 && ev.Revision < watchRevs[n-1] {
				watchBadness = append(watchBadness, fmt.Sprintf("revision %d after %d", ev.Revision, watchRevs[n-1]))
			}
			id := fmt.Sprintf("%d %s %s", ev.Revision, ev.Type, ev.Lease.Key)
			if watchSeen[id] {
				watchBadness = append(watchBadness, "repeated "+id)
			}
			watchSeen[id] = true
			watchRevs = append(watchRevs, ev.Revision)
			return nil
		})
	}()

	h := newHistory()
	var (
		stop       = make(chan struct{})
		wg         sync.WaitGroup
		killedAt   atomic.Int64 // unix nanos
		afterKill  atomic.Int64 // grants acknowledged after the kill
		firstAfter atomic.Int64 // nanos from kill to the first grant
		failures   atomic.Int64
	)
	for w := range 6 {
		wg.Go(func() {
			cl := newCl(fmt.Sprintf("worker%d", w))
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("load/%d", (w+i)%4)
				h.tried(key)
				sent := time.Now()
				actx, cancel := context.WithTimeout(ctx, 5*time.Second)
				l, err := cl.Acquire(actx, key, client.WithTTL(2*time.Second), client.WithWait(time.Second))
				cancel()
				if err != nil {
					failures.Add(1)
					continue
				}
				g := &grant{key: key, id: l.ID(), owner: l.Owner(), token: l.Token(), sent: sent, acked: time.Now()}
				if err := h.acked(g); err != nil {
					t.Error(err)
				}
				if k := killedAt.Load(); k != 0 && sent.UnixNano() > k {
					if afterKill.Add(1) == 1 {
						firstAfter.Store(time.Now().UnixNano() - k)
					}
				}
				rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				err = l.Release(rctx)
				cancel()
				h.setReleased(g, err == nil, err != nil)
			}
		})
	}

	time.Sleep(1500 * time.Millisecond) // steady load before the kill
	if h.count() == 0 {
		t.Fatal("no grants before the kill")
	}
	victims := []int{leader}
	for i := 1; len(victims) < 1+alsoFollowers; i++ {
		victims = append(victims, (leader+i)%n)
	}
	watchMu.Lock()
	watchAtKill := len(watchRevs)
	watchMu.Unlock()
	killedAt.Store(time.Now().UnixNano())
	for _, v := range victims {
		if pause {
			c.nodes[v].stopped = true
			if err := c.nodes[v].p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			continue
		}
		c.nodes[v].p.killed.Store(true)
		c.nodes[v].p.cmd.Process.Kill()
	}
	for _, v := range victims {
		if !pause {
			<-c.nodes[v].p.exited
		}
	}
	t.Logf("killed or paused %v (leader %s)", victims, c.nodes[leader].id)

	// Every live endpoint alone serves acquisitions again.
	for i := range c.nodes {
		if !c.alive(i) {
			continue
		}
		single, err := client.New(client.Config{Endpoint: c.nodes[i].url})
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(15 * time.Second)
		for {
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			l, err := single.Acquire(pctx, fmt.Sprintf("probe/%s", c.nodes[i].id), client.WithTTL(2*time.Second))
			cancel()
			if err == nil {
				l.Release(ctx)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no acquisition through %s within 15s of the kill: %v", c.nodes[i].id, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	newLeader := c.waitLeader(15 * time.Second)
	t.Logf("new leader %s", c.nodes[newLeader].id)

	// Let holders renew at least once at the new leader (every TTL/3).
	time.Sleep(4 * time.Second)
	close(stop)
	wg.Wait()
	if afterKill.Load() == 0 {
		t.Fatal("no grant acknowledged after the kill")
	}
	t.Logf("%d grants, %d after the kill, the first %v after it; %d failed attempts",
		h.count(), afterKill.Load(), time.Duration(firstAfter.Load()), failures.Load())

	wcancel()
	if err := <-watchDone; !errors.Is(err, context.Canceled) {
		t.Errorf("watch ended with %v", err)
	}
	watchMu.Lock()
	if len(watchBadness) > 0 {
		t.Errorf("watch across the failover: %v", watchBadness)
	}
	if len(watchRevs) <= watchAtKill {
		t.Errorf("watch saw no event after the kill (%d before it)", watchAtKill)
	}
	t.Logf("watch saw %d events before the kill, %d after", watchAtKill, len(watchRevs)-watchAtKill)
	watchMu.Unlock()

	for _, l := range holders {
		if err := l.Err(); err != nil {
			t.Errorf("healthy holder of %q lost its lease across the failover: %v", l.Key(), err)
		}
	}
	h.checkRealTimeOrder(t)
	obs := newClient(c.nodes[newLeader].url)
	for key := range h.keys {
		g, err := obs.Get(ctx, connect.NewRequest(&fencedv1.GetRequest{Key: key}))
		if err != nil {
			t.Fatalf("get %q: %v", key, err)
		}
		if last := g.Msg.GetLastToken(); last < h.maxToken(key) {
			t.Errorf("%q: lastToken %d below the acknowledged %d: an acknowledged grant was lost", key, last, h.maxToken(key))
		}
	}
	for _, l := range holders {
		g, err := obs.Get(ctx, connect.NewRequest(&fencedv1.GetRequest{Key: l.Key()}))
		if err != nil || g.Msg.GetLease().GetToken() != l.Token() || g.Msg.GetLease().GetOwner() != l.Owner() {
			t.Errorf("holder of %q: server shows %v %v, want token %d", l.Key(), g, err, l.Token())
		}
	}

	// The killed nodes come back on their data directories, with the same
	// flags, and rejoin: they follow the leader and catch up.
	for _, v := range victims {
		if pause {
			if err := c.nodes[v].p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			c.nodes[v].stopped = false
			continue
		}
		c.start(v)
	}
	leaderStats := stats(t, c.nodes[newLeader].url)
	for _, v := range victims {
		deadline := time.Now().Add(20 * time.Second)
		for {
			r, rerr := c.role(v)
			st, serr := fetchStats(c.nodes[v].url)
			if rerr == nil && serr == nil && r.LeaderID != "" && r.LeaderID != c.nodes[v].id && st.AppliedIndex >= leaderStats.CommitIndex {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s did not rejoin within 20s: role %+v %v, stats %+v %v", c.nodes[v].id, r, rerr, st, serr)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	for _, l := range holders {
		if err := l.Release(ctx); err != nil {
			t.Errorf("release %q: %v", l.Key(), err)
		}
	}
}

func fetchStats(url string) (server.Stats, error) {
	hc := &http.Client{Timeout: time.Second}
	resp, err := hc.Get(url + "/v1/stats")
	if err != nil {
		return server.Stats{}, err
	}
	defer resp.Body.Close()
	var st server.Stats
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

func stats(t *testing.T, url string) server.Stats {
	t.Helper()
	st, err := fetchStats(url)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestClusterMembershipAndWaiterFailover adds a node started with --join,
// moves leadership to it while an acquisition waits in line at the old
// leader, and removes a member. The waiter must follow the leadership: it
// gets the key when the holder releases it at the new leader, long before
// its wait ends.
func TestClusterMembershipAndWaiterFailover(t *testing.T) {
	c := newTestCluster(t, 3)
	leader := c.waitLeader(20 * time.Second)
	ctx := context.Background()

	// A fourth node joins.
	n4 := &clusterNode{id: "n4", api: testutil.MustFreeAddr(t), raft: testutil.MustFreeAddr(t), dataDir: filepath.Join(t.TempDir(), "data")}
	n4.url = "http://" + n4.api
	c.nodes = append(c.nodes, n4)
	c.startJoining(3)
	admin := fencedv1connect.NewClusterServiceClient(http.DefaultClient, c.nodes[(leader+1)%3].url)
	var added *connect.Response[fencedv1.AddMemberResponse]
	for deadline := time.Now().Add(10 * time.Second); ; {
		var err error
		added, err = admin.AddMember(ctx, connect.NewRequest(&fencedv1.AddMemberRequest{Id: "n4", Address: n4.raft}))
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("add n4 through a follower: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if ms := added.Msg.GetMembers(); len(ms) != 4 || ms[3].GetId() != "n4" || !ms[3].GetVoter() {
		t.Fatalf("members after adding n4: %v", ms)
	}
	c.waitLeader(10 * time.Second)

	// A holder, and a waiter queued at the leader itself.
	lc := newClient(c.nodes[leader].url)
	a, err := lc.Acquire(ctx, connect.NewRequest(&fencedv1.AcquireRequest{Key: "w", Owner: "holder", TtlMs: 30_000}))
	if err != nil {
		t.Fatal(err)
	}
	held := a.Msg.GetLease()
	type result struct {
		l   *fencedv1.Lease
		err error
		at  time.Time
	}
	waited := make(chan result, 1)
	go func() {
		r, err := lc.Acquire(ctx, connect.NewRequest(&fencedv1.AcquireRequest{Key: "w", Owner: "waiter", TtlMs: 30_000, WaitMs: 20_000}))
		res := result{err: err, at: time.Now()}
		if err == nil {
			res.l = r.Msg.GetLease()
		}
		waited <- res
	}()
	// The waiter is in line once the leader reports it.
	for deadline := time.Now().Add(5 * time.Second); ; {
		if st := stats(t, c.nodes[leader].url); st.Waiters == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the waiter never queued")
		}
		time.Sleep(10 * time.Millisecond)
	}

	tr, err := admin.TransferLeadership(ctx, connect.NewRequest(&fencedv1.TransferLeadershipRequest{Id: "n4"}))
	if err != nil || tr.Msg.GetLeaderId() != "n4" {
		t.Fatalf("transfer leadership to n4: %v %v", tr, err)
	}
	if got := c.waitLeader(10 * time.Second); got != 3 {
		t.Fatalf("leader %s after the transfer, want n4", c.nodes[got].id)
	}
	released := time.Now()
	if _, err := newClient(n4.url).Release(ctx, connect.NewRequest(&fencedv1.ReleaseRequest{Key: "w", LeaseId: held.GetLeaseId()})); err != nil {
		t.Fatalf("release at the new leader: %v", err)
	}
	select {
	case r := <-waited:
		if r.err != nil {
			t.Fatalf("waiter queued at the old leader: %v after %v", r.err, r.at.Sub(released))
		}
		if r.l.GetOwner() != "waiter" || r.l.GetToken() <= held.GetToken() {
			t.Errorf("waiter got %v, holder had token %d", r.l, held.GetToken())
		}
		if d := r.at.Sub(released); d > 5*time.Second {
			t.Errorf("waiter got the key %v after the release", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter queued at the old leader did not get the key within 10s of its release at the new leader")
	}

	// Remove a member that is not the leader; the others go on.
	removed, err := admin.RemoveMember(ctx, connect.NewRequest(&fencedv1.RemoveMemberRequest{Id: c.nodes[(leader+2)%3].id}))
	if err != nil || len(removed.Msg.GetMembers()) != 3 {
		t.Fatalf("remove %s: %v %v", c.nodes[(leader+2)%3].id, removed, err)
	}
	if _, err := admin.RemoveMember(ctx, connect.NewRequest(&fencedv1.RemoveMemberRequest{Id: "n9"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("remove an unknown member: %v, want not_found", err)
	}
	if _, err := newClient(n4.url).Acquire(ctx, connect.NewRequest(&fencedv1.AcquireRequest{Key: "after-remove", Owner: "x", TtlMs: 10_000})); err != nil {
		t.Errorf("acquire after the removal: %v", err)
	}
}

// startJoining starts node i with --join and no initial cluster.
func (c *testCluster) startJoining(i int) {
	t := c.t
	nd := c.nodes[i]
	nd.starts++
	logFile, err := os.Create(filepath.Join(c.logDir, fmt.Sprintf("%s-start%d.log", nd.id, nd.starts)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logFile.Close() })
	cmd := exec.Command(c.bin, "--node-id", nd.id, "--join", "--raft-listen", nd.raft,
		"--listen", nd.api, "--data-dir", nd.dataDir, "--log-level", "warn")
	cmd.Args = append(cmd.Args, nd.extraArgs...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", nd.id, err)
	}
	p := &fencedProcess{url: nd.url, cmd: cmd, exited: make(chan struct{})}
	go func() { cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-p.exited })
	nd.p = p
}

// sessionThrough checks that a Session stream through nd serves its calls
// as the unary calls are served there (at the leader, forwarded from a
// follower): key is held by l.
func sessionThrough(t *testing.T, nd *clusterNode, key string, l *fencedv1.Lease) {
	t.Helper()
	protocols := new(http.Protocols)
	protocols.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: protocols}
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st := fencedv1connect.NewLeaseServiceClient(&http.Client{Transport: tr}, nd.url).Session(ctx)
	defer st.CloseResponse()
	for _, req := range []*fencedv1.SessionRequest{
		{Id: 1, Call: &fencedv1.SessionRequest_Renew{Renew: &fencedv1.RenewRequest{Key: key, LeaseId: l.GetLeaseId()}}},
		{Id: 2, Call: &fencedv1.SessionRequest_Acquire{Acquire: &fencedv1.AcquireRequest{Key: key, Owner: "B", TtlMs: 10_000}}},
		{Id: 3, Call: &fencedv1.SessionRequest_Release{Release: &fencedv1.ReleaseRequest{Key: key, LeaseId: "00"}}},
	} {
		if err := st.Send(req); err != nil {
			t.Fatalf("session via %s: %v", nd.id, err)
		}
	}
	if err := st.CloseRequest(); err != nil {
		t.Fatal(err)
	}
	got := map[uint64]*fencedv1.SessionResponse{}
	for range 3 {
		resp, err := st.Receive()
		if err != nil {
			t.Fatalf("session via %s: %v", nd.id, err)
		}
		got[resp.GetId()] = resp
	}
	if r := got[1].GetRenew().GetLease(); r.GetToken() != l.GetToken() {
		t.Errorf("session renewal via %s: %v", nd.id, got[1])
	}
	if e := got[2].GetError(); e.GetCode() != "failed_precondition" || e.GetHeld().GetOwner() != "A" || e.GetHeld().GetToken() != l.GetToken() {
		t.Errorf("session acquisition of a held key via %s: %v, want failed_precondition naming A", nd.id, got[2])
	}
	if e := got[3].GetError(); e.GetCode() != "not_found" {
		t.Errorf("session release of a stale lease via %s: %v, want not_found", nd.id, got[3])
	}
	if _, err := st.Receive(); !errors.Is(err, io.EOF) {
		t.Errorf("end of the session via %s: %v", nd.id, err)
	}
}
