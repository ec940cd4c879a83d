package main

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/api/fenced/v1/fencedv1connect"
	"github.com/fencedio/fenced/internal/testenv"
)

// TestClusterWipedMemberDoesNotForget replays a disk loss: one follower
// is down; the leader grants k to alice, committed on itself and the other
// follower; that follower loses its data directory and the leader dies;
// the two followers start again with their usual command lines. They must
// not elect a leader that never saw alice's grant: k stays alice's, or
// nothing is served until the old leader returns. Then the documented
// recovery (remove, wipe, --join, member add) brings the member back.
func TestClusterWipedMemberDoesNotForget(t *testing.T) {
	testenv.SkipUnlessLong(t)
	c := newTestCluster(t, 3)
	leader := c.waitLeader(20 * time.Second)
	down, wiped := (leader+1)%3, (leader+2)%3
	ctx := context.Background()

	c.kill(down)
	a, err := newClient(c.nodes[leader].url).Acquire(ctx, connect.NewRequest(&fencedv1.AcquireRequest{Key: "k", Owner: "alice", TtlMs: 120_000}))
	if err != nil {
		t.Fatalf("alice's acquisition with %s down: %v", c.nodes[down].id, err)
	}
	alice := a.Msg.GetLease()
	c.kill(wiped)
	if err := os.RemoveAll(c.nodes[wiped].dataDir); err != nil {
		t.Fatal(err)
	}
	c.kill(leader)
	// Alone, the wiped member waits for its peers: it neither forms a
	// cluster nor votes.
	c.start(wiped)
	polled := 0
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		r, err := c.role(wiped)
		if err != nil {
			continue
		}
		polled++
		if len(r.Members) > 0 || r.Votes {
			t.Fatalf("with its peers down, the wiped member bootstrapped: %+v", r)
		}
	}
	if polled == 0 || !c.alive(wiped) {
		t.Fatalf("the wiped member, alone, did not wait for its peers (answered %d times, alive %v)", polled, c.alive(wiped))
	}
	c.start(down)

	// Long enough for several elections (heartbeat timeout 500ms).
	for deadline := time.Now().Add(8 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		for _, i := range []int{down, wiped} {
			if !c.alive(i) {
				continue
			}
			rctx, cancel := context.WithTimeout(ctx, time.Second)
			b, err := newClient(c.nodes[i].url).Acquire(rctx, connect.NewRequest(&fencedv1.AcquireRequest{Key: "k", Owner: "bob", TtlMs: 10_000}))
			cancel()
			if err == nil {
				t.Fatalf("k granted to bob (token %d) via %s while alice's lease (token %d) has over 100s to run",
					b.Msg.GetLease().GetToken(), c.nodes[i].id, alice.GetToken())
			}
		}
	}
	// The wiped member, started with the command line that formed the
	// cluster, refuses to start a new one.
	select {
	case <-c.nodes[wiped].p.exited:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s, started on an empty data directory with --initial-cluster, still runs", c.nodes[wiped].id)
	}
	logged, _ := os.ReadFile(filepath.Join(c.logDir, c.nodes[wiped].id+"-start2.log"))
	for _, want := range []string{"already been bootstrapped", "fencectl member remove", "--join", "fencectl member add"} {
		if !strings.Contains(string(logged), want) {
			t.Errorf("the wiped member's error does not say %q:\n%s", want, logged)
		}
	}

	// The old leader returns: alice still holds k.
	c.start(leader)
	c.waitLeaderAmong(20*time.Second, leader, down)
	_, err = newClient(c.nodes[down].url).Acquire(ctx, connect.NewRequest(&fencedv1.AcquireRequest{Key: "k", Owner: "bob", TtlMs: 10_000}))
	if connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("bob's acquisition after the old leader returned: %v, want failed_precondition (alice holds k)", err)
	}
	g, err := newClient(c.nodes[down].url).Get(ctx, connect.NewRequest(&fencedv1.GetRequest{Key: "k"}))
	if err != nil || g.Msg.GetLease().GetOwner() != "alice" || g.Msg.GetLease().GetToken() != alice.GetToken() {
		t.Fatalf("k after the old leader returned: %v %v, want alice's token %d", g, err, alice.GetToken())
	}

	// Started with --join while still in the configuration, the wiped
	// member cannot be added back without being removed first.
	admin := fencedv1connect.NewClusterServiceClient(http.DefaultClient, c.nodes[down].url)
	id := c.nodes[wiped].id
	if err := os.RemoveAll(c.nodes[wiped].dataDir); err != nil {
		t.Fatal(err)
	}
	c.startJoining(wiped)
	add := func() error {
		_, err := admin.AddMember(ctx, connect.NewRequest(&fencedv1.AddMemberRequest{Id: id, Address: c.nodes[wiped].raft}))
		return err
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		err := add()
		if connect.CodeOf(err) == connect.CodeFailedPrecondition && strings.Contains(err.Error(), "Remove it first") {
			break
		}
		if err == nil || time.Now().After(deadline) {
			t.Fatalf("member add %s while it is in the configuration on a new data directory: %v, want failed_precondition", id, err)
		}
	}
	// Its peer port answered; its API may open a moment later.
	r, err := c.role(wiped)
	for deadline := time.Now().Add(10 * time.Second); err != nil && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		r, err = c.role(wiped)
	}
	if err != nil || r.Votes || r.ClusterID != "" {
		t.Errorf("the wiped member waiting to be added: role %+v %v, want no vote and no cluster ID", r, err)
	}

	// The documented recovery: remove, then add (it runs with --join).
	if _, err := admin.RemoveMember(ctx, connect.NewRequest(&fencedv1.RemoveMemberRequest{Id: id})); err != nil {
		t.Fatalf("member remove %s: %v", id, err)
	}
	if err := add(); err != nil {
		t.Fatalf("member add %s: %v", id, err)
	}
	// The added member votes: the cluster survives the loss of another.
	c.kill(leader)
	c.waitLeaderAmong(20*time.Second, down, wiped)
	g, err = newClient(c.nodes[wiped].url).Get(ctx, connect.NewRequest(&fencedv1.GetRequest{Key: "k"}))
	if err != nil || g.Msg.GetLease().GetOwner() != "alice" {
		t.Fatalf("k after the recovery, via the re-added member: %v %v, want alice's", g, err)
	}
	if r, err := c.role(wiped); err != nil || r.ClusterID == "" || !r.Votes {
		t.Errorf("re-added member's role: %+v %v, want a cluster ID and a vote", r, err)
	} else if r0, _ := c.role(down); r0.ClusterID != r.ClusterID {
		t.Errorf("cluster IDs: %s has %q, %s has %q", c.nodes[down].id, r0.ClusterID, id, r.ClusterID)
	}
}

// waitLeaderAmong waits until one of the nodes named is the ready leader.
func (c *testCluster) waitLeaderAmong(within time.Duration, nodes ...int) int {
	c.t.Helper()
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		for _, i := range nodes {
			if r, err := c.role(i); err == nil && r.Ready {
				return i
			}
		}
	}
	c.t.Fatalf("no ready leader among %v after %v", nodes, within)
	return -1
}
