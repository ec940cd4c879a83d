package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/client"
)

// TestClusterRollingRestart restarts every node of a 3-node cluster in
// turn (SIGTERM, then the same command line on the same data directory)
// under a steady load through every endpoint. The cluster serves
// throughout but for brief failovers when the leader goes; healthy holders
// keep their leases; no acknowledged grant is lost and tokens only grow.
func TestClusterRollingRestart(t *testing.T) {
	c := newTestCluster(t, 3)
	c.waitLeader(20 * time.Second)
	ctx := context.Background()
	newCl := func(owner string) *client.Client {
		cl, err := client.New(client.Config{Endpoints: c.urls(), Owner: owner, FailoverTimeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	var holders []*client.Lease
	for i := range 3 {
		l, err := newCl(fmt.Sprintf("holder%d", i)).Acquire(ctx, fmt.Sprintf("held/%d", i))
		if err != nil {
			t.Fatal(err)
		}
		holders = append(holders, l)
	}

	load := startLoad(t, c.urls(), 4)
	time.Sleep(time.Second) // steady load first
	for i, nd := range c.nodes {
		r, _ := c.role(i)
		if err := nd.p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case <-nd.p.exited:
		case <-time.After(15 * time.Second):
			t.Fatalf("%s did not stop within 15s of SIGTERM", nd.id)
		}
		t.Logf("stopped %s (leader: %v)", nd.id, r.Ready)
		c.start(i)
		leader := c.waitLeader(20 * time.Second)
		commit := stats(t, c.nodes[leader].url).CommitIndex
		for deadline := time.Now().Add(20 * time.Second); ; {
			if st, err := fetchStats(nd.url); err == nil && st.AppliedIndex >= commit {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s did not catch up within 20s of its restart", nd.id)
			}
			time.Sleep(50 * time.Millisecond)
		}
		time.Sleep(500 * time.Millisecond) // load on the whole cluster again
	}
	h, worstGap := load.stop()
	t.Logf("%d grants; longest time without one %v", h.count(), worstGap)
	// A failover takes about two heartbeat timeouts, a vote and an fsync,
	// then the client's retry: seconds, not more.
	if worstGap > 5*time.Second {
		t.Errorf("the cluster granted nothing for %v during the rolling restart", worstGap)
	}
	for _, l := range holders {
		if err := l.Err(); err != nil {
			t.Errorf("healthy holder of %q lost its lease in the rolling restart: %v", l.Key(), err)
		}
	}
	checkLoad(t, h, c.nodes[c.waitLeader(10*time.Second)].url)
	for _, l := range holders {
		if err := l.Release(ctx); err != nil {
			t.Errorf("release %q: %v", l.Key(), err)
		}
	}
}

// load is a steady stream of acquisitions and releases of a few keys, by
// workers whose clients fail over between the endpoints.
type load struct {
	h        *history
	done     chan struct{}
	wg       sync.WaitGroup
	lastAck  atomic.Int64 // unix nanos of the latest acknowledged grant
	gapMu    sync.Mutex
	worstGap time.Duration
}

func startLoad(t *testing.T, endpoints []string, workers int) *load {
	t.Helper()
	ld := &load{h: newHistory(), done: make(chan struct{})}
	ld.lastAck.Store(time.Now().UnixNano())
	ctx := context.Background()
	for w := range workers {
		cl, err := client.New(client.Config{Endpoints: endpoints, Owner: fmt.Sprintf("worker%d", w), FailoverTimeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		ld.wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-ld.done:
					return
				default:
				}
				key := fmt.Sprintf("load/%d", (w+i)%4)
				ld.h.tried(key)
				sent := time.Now()
				actx, cancel := context.WithTimeout(ctx, 5*time.Second)
				l, err := cl.Acquire(actx, key, client.WithTTL(2*time.Second), client.WithWait(time.Second))
				cancel()
				if err != nil {
					continue
				}
				now := time.Now()
				ld.gapMu.Lock()
				ld.worstGap = max(ld.worstGap, now.Sub(time.Unix(0, ld.lastAck.Swap(now.UnixNano()))))
				ld.gapMu.Unlock()
				g := &grant{key: key, id: l.ID(), owner: l.Owner(), token: l.Token(), sent: sent, acked: now}
				if err := ld.h.acked(g); err != nil {
					t.Error(err)
				}
				rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				err = l.Release(rctx)
				cancel()
				ld.h.setReleased(g, err == nil, err != nil)
			}
		})
	}
	return ld
}

// stop ends the load and returns its history and the longest time between
// two acknowledged grants.
func (ld *load) stop() (*history, time.Duration) {
	close(ld.done)
	ld.wg.Wait()
	ld.gapMu.Lock()
	defer ld.gapMu.Unlock()
	return ld.h, ld.worstGap
}

// checkLoad checks the load's history: tokens grow in real time per key
// (no token twice, none out of order: acked checked that as it went), and
// the cluster, read through url, knows every acknowledged grant.
func checkLoad(t *testing.T, h *history, url string) {
	t.Helper()
	h.checkRealTimeOrder(t)
	obs := newClient(url)
	for key := range h.keys {
		// A read is safe to repeat: one refused unavailable (the leader
		// stepped down meanwhile, as a loaded machine makes it do) is
		// asked again until a leader answers.
		g, err := obs.Get(context.Background(), connect.NewRequest(&fencedv1.GetRequest{Key: key}))
		for deadline := time.Now().Add(10 * time.Second); connect.CodeOf(err) == connect.CodeUnavailable && time.Now().Before(deadline); {
			time.Sleep(100 * time.Millisecond)
			g, err = obs.Get(context.Background(), connect.NewRequest(&fencedv1.GetRequest{Key: key}))
		}
		if err != nil {
			t.Fatalf("get %q: %v", key, err)
		}
		if last := g.Msg.GetLastToken(); last < h.maxToken(key) {
			t.Errorf("%q: lastToken %d below the acknowledged %d: an acknowledged grant was lost", key, last, h.maxToken(key))
		}
	}
}
