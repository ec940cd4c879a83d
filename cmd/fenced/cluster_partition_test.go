package main

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/internal/faultproxy"
)

// proxiedCluster is a cluster whose every raft peer port sits behind a
// fault-injecting proxy. Node i listens for peers on 127.0.0.(i+2) and
// dials them from there, so a proxy tells its peers apart by source host:
// links can be cut one by one.
type proxiedCluster struct {
	*testCluster
	hosts   []string
	proxies []*faultproxy.Proxy
}

func newProxiedCluster(t *testing.T, n int) *proxiedCluster {
	t.Helper()
	c := &proxiedCluster{testCluster: newStoppedCluster(t, n)}
	var ic []string
	for i, nd := range c.nodes {
		host := fmt.Sprintf("127.0.0.%d", i+2)
		ln, err := net.Listen("tcp", host+":0")
		if err != nil {
			t.Skipf("loopback address %s: %v", host, err)
		}
		listen := ln.Addr().String()
		ln.Close()
		p, err := faultproxy.Listen("127.0.0.1:0", listen)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		c.hosts = append(c.hosts, host)
		c.proxies = append(c.proxies, p)
		nd.raft = p.Addr()
		nd.extraArgs = []string{"--raft-listen", listen, "--raft-advertise", p.Addr()}
		ic = append(ic, nd.id+"="+nd.raft)
	}
	c.ic = strings.Join(ic, ",")
	for i := range c.nodes {
		c.start(i)
	}
	return c
}

// isolate cuts node i off from every other node, both ways.
func (c *proxiedCluster) isolate(i int) {
	for j, p := range c.proxies {
		if j == i {
			p.Partition()
		} else {
			p.Partition(c.hosts[i])
		}
	}
}

func (c *proxiedCluster) heal() {
	for _, p := range c.proxies {
		p.Heal()
	}
}

// waitLeaderAmong waits until one of the nodes in among serves as leader
// and the others of among name it; it returns its index.
func (c *proxiedCluster) waitLeaderAmong(among []int, within time.Duration) int {
	c.t.Helper()
	for deadline := time.Now().Add(within); ; {
		leader := -1
		for _, i := range among {
			if r, err := c.role(i); err == nil && r.Ready {
				leader = i
			}
		}
		agreed := leader >= 0
		for _, i := range among {
			if r, err := c.role(i); leader >= 0 && (err != nil || r.LeaderID != c.nodes[leader].id) {
				agreed = false
			}
		}
		if agreed {
			return leader
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("no leader among %v within %v", among, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitFollowing waits until node i follows the leader and has applied all
// it had committed when the wait began.
func (c *proxiedCluster) waitFollowing(i, leader int, within time.Duration) {
	c.t.Helper()
	commit := stats(c.t, c.nodes[leader].url).CommitIndex
	for deadline := time.Now().Add(within); ; {
		r, rerr := c.role(i)
		st, serr := fetchStats(c.nodes[i].url)
		if rerr == nil && serr == nil && r.LeaderID == c.nodes[leader].id && !r.Ready && st.AppliedIndex >= commit {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s does not follow %s within %v: role %+v %v, stats %+v %v", c.nodes[i].id, c.nodes[leader].id, within, r, rerr, st, serr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (c *proxiedCluster) others(i int) []int {
	var out []int
	for j := range c.nodes {
		if j != i {
			out = append(out, j)
		}
	}
	return out
}

// callsRefused checks that node i acknowledges no acquisition, renewal or
// linearizable read: each one fails.
func callsRefused(t *testing.T, url, what string, held *fencedv1.Lease) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	rpc := newClient(url)
	if a, err := rpc.Acquire(ctx, connect.NewRequest(&fencedv1.AcquireRequest{Key: "cut/" + what, Owner: "X", TtlMs: 10_000})); err == nil {
		t.Errorf("%s acknowledged an acquisition: %v", what, a.Msg.GetLease())
	}
	if r, err := rpc.Renew(ctx, connect.NewRequest(&fencedv1.RenewRequest{Key: held.GetKey(), LeaseId: held.GetLeaseId()})); err == nil {
		t.Errorf("%s acknowledged a renewal: %v", what, r.Msg.GetLease())
	}
	if g, err := rpc.Get(ctx, connect.NewRequest(&fencedv1.GetRequest{Key: held.GetKey()})); err == nil {
		t.Errorf("%s answered a linearizable read: %v", what, g.Msg)
	}
}

// TestClusterLeaderPartition cuts the leader of a 3-node cluster off from
// both followers. Within its leader lease the old leader stops
// acknowledging renewals, acquisitions and reads; the majority elects a
// new leader and serves, with tokens above every earlier one and never two
// holders of a key; a healthy holder keeps its lease; after the partition
// heals the old leader follows the new one.
func TestClusterLeaderPartition(t *testing.T) {
	c := newProxiedCluster(t, 3)
	old := c.waitLeaderAmong([]int{0, 1, 2}, 20*time.Second)
	ctx := context.Background()
	holderCl, err := client.New(client.Config{Endpoints: c.urls(), Owner: "holder", FailoverTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	holder, err := holderCl.Acquire(ctx, "held/healthy")
	if err != nil {
		t.Fatal(err)
	}
	// A lease that nobody renews once the partition begins: the majority
	// may grant its key again only after its expiry there.
	rpc := newClient(c.nodes[old].url)
	a, err := rpc.Acquire(ctx, connect.NewRequest(&fencedv1.AcquireRequest{Key: "contended", Owner: "A", TtlMs: 2_000}))
	if err != nil {
		t.Fatal(err)
	}
	before := a.Msg.GetLease()
	load := startLoad(t, c.urls(), 4)
	time.Sleep(time.Second) // steady load first

	c.isolate(old)
	cut := time.Now()
	t.Logf("isolated the leader %s", c.nodes[old].id)
	// The leader lease is half the heartbeat timeout (250ms): after a full
	// heartbeat timeout the old leader must refuse everything.
	time.Sleep(500 * time.Millisecond)
	callsRefused(t, c.nodes[old].url, "the isolated old leader", before)

	others := c.others(old)
	newLeader := c.waitLeaderAmong(others, 15*time.Second)
	// Not a failover time: the refused calls above wait out their deadlines
	// first. The load's longest gap between grants, logged below, is one.
	t.Logf("new leader %s", c.nodes[newLeader].id)
	callsRefused(t, c.nodes[old].url, "the isolated old leader", before)

	// The majority serves, through both its endpoints. The contended key
	// comes free once the lease the old leader granted expires there.
	var after *fencedv1.Lease
	for deadline := time.Now().Add(15 * time.Second); after == nil; {
		for _, i := range others {
			actx, cancel := context.WithTimeout(ctx, 2*time.Second)
			r, err := newClient(c.nodes[i].url).Acquire(actx, connect.NewRequest(&fencedv1.AcquireRequest{Key: "contended", Owner: "B", TtlMs: 10_000}))
			cancel()
			if err == nil {
				after = r.Msg.GetLease()
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the majority never granted the contended key")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if after.GetToken() <= before.GetToken() {
		t.Errorf("token %d granted by the majority is not above %d granted before the partition", after.GetToken(), before.GetToken())
	}
	if since := time.Since(cut); since < 2*time.Second {
		t.Errorf("the majority granted the contended key %v after the cut, before the 2s TTL of its holder ran out", since)
	}
	callsRefused(t, c.nodes[old].url, "the isolated old leader", after)

	c.heal()
	c.waitFollowing(old, newLeader, 20*time.Second)
	g, err := newClient(c.nodes[old].url).Get(ctx, connect.NewRequest(&fencedv1.GetRequest{Key: "contended"}))
	if err != nil || g.Msg.GetLease().GetToken() != after.GetToken() || g.Msg.GetLease().GetOwner() != "B" {
		t.Errorf("read through the healed old leader: %v %v, want B's lease with token %d", g, err, after.GetToken())
	}
	time.Sleep(time.Second) // load on the healed cluster
	h, worstGap := load.stop()
	t.Logf("%d grants under load; longest time without one %v", h.count(), worstGap)
	if h.count() == 0 {
		t.Error("no grant under load")
	}
	checkLoad(t, h, c.nodes[newLeader].url)
	if err := holder.Err(); err != nil {
		t.Errorf("the healthy holder lost its lease: %v", err)
	}
	if err := holder.Release(ctx); err != nil {
		t.Errorf("release the healthy holder's lease: %v", err)
	}
}

// TestClusterFollowerIsolated cuts one follower off. The leader and the
// other follower go on serving; the isolated follower answers no
// acquisition, renewal or linearizable read (it cannot reach the leader),
// and catches up once the partition heals.
func TestClusterFollowerIsolated(t *testing.T) {
	c := newProxiedCluster(t, 3)
	leader := c.waitLeaderAmong([]int{0, 1, 2}, 20*time.Second)
	follower := (leader + 1) % 3
	ctx := context.Background()
	a, err := newClient(c.nodes[leader].url).Acquire(ctx, connect.NewRequest(&fencedv1.AcquireRequest{Key: "k", Owner: "A", TtlMs: 30_000}))
	if err != nil {
		t.Fatal(err)
	}
	c.isolate(follower)
	callsRefused(t, c.nodes[follower].url, "the isolated follower", a.Msg.GetLease())
	// The two connected nodes are a quorum: they serve. On a starved
	// machine the leader can miss its leader lease and an election follow;
	// that is unavailable for an election's time, which the calls wait out.
	// Any other answer, or none within the bound, fails.
	var last uint64
	for i, j := range c.others(follower) {
		var r *connect.Response[fencedv1.AcquireResponse]
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			r, err = newClient(c.nodes[j].url).Acquire(ctx, connect.NewRequest(&fencedv1.AcquireRequest{Key: fmt.Sprintf("during/%d", i), Owner: "B", TtlMs: 30_000}))
			if err == nil || connect.CodeOf(err) != connect.CodeUnavailable || time.Now().After(deadline) {
				break
			}
		}
		if err != nil {
			t.Fatalf("acquire through %s while %s is isolated: %v", c.nodes[j].id, c.nodes[follower].id, err)
		}
		last = r.Msg.GetLease().GetToken()
	}
	leader = c.waitLeaderAmong(c.others(follower), 10*time.Second)
	c.heal()
	c.waitFollowing(follower, leader, 20*time.Second)
	g, err := newClient(c.nodes[follower].url).Get(ctx, connect.NewRequest(&fencedv1.GetRequest{Key: "during/1"}))
	if err != nil || g.Msg.GetLease().GetToken() != last {
		t.Errorf("read through the healed follower: %v %v, want token %d", g, err, last)
	}
}
