package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/internal/testenv"
)

// Operators' mistakes with a member's data directory: each must be refused
// rather than let the cluster forget an acknowledged grant.

// acquireOn acquires key for owner through node i, with a long TTL.
func (c *testCluster) acquireOn(i int, key, owner string) *fencedv1.Lease {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := newClient(c.nodes[i].url).Acquire(ctx, connect.NewRequest(&fencedv1.AcquireRequest{Key: key, Owner: owner, TtlMs: 300_000}))
	if err != nil {
		c.t.Fatalf("acquire %s for %s via %s: %v", key, owner, c.nodes[i].id, err)
	}
	return r.Msg.GetLease()
}

// waitExit waits for node i to exit on its own and returns its log.
func (c *testCluster) waitExit(i int, within time.Duration) string {
	c.t.Helper()
	nd := c.nodes[i]
	select {
	case <-nd.p.exited:
	case <-time.After(within):
		c.t.Fatalf("%s still runs after %v", nd.id, within)
	}
	b, _ := os.ReadFile(filepath.Join(c.logDir, nd.id+"-start"+strconv.Itoa(nd.starts)+".log"))
	return string(b)
}

// A member whose member.json survives but whose raft log was deleted (an
// operator "fixes" a corrupt log by deleting wal/) refuses to start: with
// its identity it would vote with an empty log, and a candidate that never
// saw a grant could win with that vote.
func TestClusterMemberWithLostLogRefusesToStart(t *testing.T) {
	testenv.SkipUnlessLong(t)
	c := newTestCluster(t, 3)
	leader := c.waitLeader(20 * time.Second)
	lost := (leader + 1) % 3
	alice := c.acquireOn(leader, "k", "alice")
	c.kill(lost)
	if err := os.RemoveAll(filepath.Join(c.nodes[lost].dataDir, "wal")); err != nil {
		t.Fatal(err)
	}
	c.start(lost)
	logged := c.waitExit(lost, 20*time.Second)
	for _, want := range []string{"does not match the member's identity", "fencectl member remove", "--join"} {
		if !strings.Contains(logged, want) {
			t.Errorf("the member with a lost log does not say %q:\n%s", want, logged)
		}
	}
	// The others still hold alice's grant.
	g, err := newClient(c.nodes[leader].url).Get(context.Background(), connect.NewRequest(&fencedv1.GetRequest{Key: "k"}))
	if err != nil || g.Msg.GetLease().GetToken() != alice.GetToken() {
		t.Fatalf("k after the refused start: %v %v, want alice's token %d", g, err, alice.GetToken())
	}
}

// A member started on an older copy of its own data directory is refused
// by the leader it acknowledged entries to, and named in its role; the
// grants it forgot are not granted again.
func TestClusterRolledBackMemberIsRefused(t *testing.T) {
	testenv.SkipUnlessLong(t)
	c := newTestCluster(t, 3)
	leader := c.waitLeader(20 * time.Second)
	back, third := (leader+1)%3, (leader+2)%3
	c.acquireOn(leader, "k0", "early")
	c.kill(back)
	copyDir := filepath.Join(t.TempDir(), "copy")
	if err := os.CopyFS(copyDir, os.DirFS(c.nodes[back].dataDir)); err != nil {
		t.Fatal(err)
	}
	c.start(back)
	// With the third member down, every grant from here on is acknowledged
	// by the member about to be rolled back.
	c.kill(third)
	alice := c.acquireOn(leader, "k", "alice")
	for i := range 20 {
		c.acquireOn(leader, "more"+strconv.Itoa(i%10)+strconv.Itoa(i/10), "x")
	}
	c.start(third)
	c.kill(back)
	if err := os.RemoveAll(c.nodes[back].dataDir); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(copyDir, c.nodes[back].dataDir); err != nil {
		t.Fatal(err)
	}
	c.start(back)
	deadline := time.Now().Add(20 * time.Second)
	for {
		r, err := c.role(leader)
		if err == nil && strings.Contains(r.RolledBack[c.nodes[back].id], "rolled-back data directory") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the leader's role after %s came back on an older copy: %+v %v; want it named as rolled back", c.nodes[back].id, r, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	ctx := context.Background()
	for i := range c.nodes {
		_, err := newClient(c.nodes[i].url).Acquire(ctx, connect.NewRequest(&fencedv1.AcquireRequest{Key: "k", Owner: "bob", TtlMs: 10_000}))
		if err == nil {
			t.Fatalf("k granted to bob via %s while alice (token %d) holds it", c.nodes[i].id, alice.GetToken())
		}
	}
}
