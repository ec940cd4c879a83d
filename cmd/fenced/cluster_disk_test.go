package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/api/fenced/v1/fencedv1connect"
	"github.com/fencedio/fenced/internal/testenv"
	"github.com/fencedio/fenced/server"
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

// waitFollows waits until node i names node leader as the leader it
// hears from.
func (c *testCluster) waitFollows(i, leader int, within time.Duration) {
	c.t.Helper()
	for deadline := time.Now().Add(within); ; {
		if r, err := c.role(i); err == nil && r.LeaderID == c.nodes[leader].id {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s does not follow %s after %v", c.nodes[i].id, c.nodes[leader].id, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
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
	// The leader must count the restarted member in its quorum before the
	// third goes down, or it steps down for want of one.
	c.waitFollows(back, leader, 20*time.Second)
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
	ms, err := fencedv1connect.NewClusterServiceClient(http.DefaultClient, c.nodes[leader].url).ListMembers(ctx, connect.NewRequest(&fencedv1.ListMembersRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms.Msg.GetMembers() {
		if refused := m.GetRefused() != ""; refused != (m.GetId() == c.nodes[back].id) {
			t.Errorf("member list through the leader: %s refused %q", m.GetId(), m.GetRefused())
		}
	}
	for i := range c.nodes {
		_, err := newClient(c.nodes[i].url).Acquire(ctx, connect.NewRequest(&fencedv1.AcquireRequest{Key: "k", Owner: "bob", TtlMs: 10_000}))
		if err == nil {
			t.Fatalf("k granted to bob via %s while alice (token %d) holds it", c.nodes[i].id, alice.GetToken())
		}
	}
}

// backupOf takes a backup through url: the file and its index.
func backupOf(t *testing.T, url string) (string, uint64) {
	t.Helper()
	resp, err := http.Get(url + "/v1/backup")
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/backup: %v %v", resp.Status, err)
	}
	at, _ := strconv.ParseUint(resp.Header.Get(server.BackupIndexHeader), 10, 64)
	file := filepath.Join(t.TempDir(), "backup.fenced")
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return file, at
}

// restoreNode writes node i's data directory from backup, moving the old
// one aside.
func (c *testCluster) restoreNode(i int, backup string) {
	c.t.Helper()
	nd := c.nodes[i]
	if err := os.Rename(nd.dataDir, nd.dataDir+".old"+strconv.Itoa(nd.starts)); err != nil && !os.IsNotExist(err) {
		c.t.Fatal(err)
	}
	out, err := exec.Command(c.bin, "restore", "--from", backup, "--data-dir", nd.dataDir, "--node-id", nd.id,
		"--initial-cluster", c.ic, "--start-floor", "1").CombinedOutput()
	if err != nil {
		c.t.Fatalf("fenced restore %s: %v\n%s", nd.id, err, out)
	}
}

// waitLog waits until node i's log of its current start says want.
func (c *testCluster) waitLog(i int, want string, within time.Duration) {
	c.t.Helper()
	nd := c.nodes[i]
	path := filepath.Join(c.logDir, nd.id+"-start"+strconv.Itoa(nd.starts)+".log")
	for deadline := time.Now().Add(within); ; time.Sleep(100 * time.Millisecond) {
		b, _ := os.ReadFile(path)
		if strings.Contains(string(b), want) {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s did not log %q within %v:\n%s", nd.id, want, within, b)
		}
	}
}

// A cluster restored from a backup onto the old members' addresses meets a
// member of the old cluster that kept its data directory: the old member
// is refused (another cluster ID), however high its term, and the restored
// state stands. Members restored from different backups refuse each other.
func TestClusterRestoredMeetsOldMember(t *testing.T) {
	testenv.SkipUnlessLong(t)
	c := newTestCluster(t, 3)
	leader := c.waitLeader(20 * time.Second)
	url := c.nodes[leader].url
	churn(t, url, "backed-up", 10)
	first, at := backupOf(t, url)
	lost := churn(t, url, "backed-up", 30)
	second, _ := backupOf(t, url)
	for i := range c.nodes {
		c.kill(i)
	}
	// n1 and n2 restored; n3 keeps the old cluster's directory, with a term
	// and a log far ahead of the backup's.
	c.restoreNode(0, first)
	c.restoreNode(1, first)
	for i := range c.nodes {
		c.start(i)
	}
	c.waitLog(2, "another cluster", 20*time.Second)
	deadline := time.Now().Add(20 * time.Second)
	for {
		r0, err0 := c.role(0)
		r1, err1 := c.role(1)
		if err0 == nil && err1 == nil && (r0.Ready || r1.Ready) && r0.LeaderID == r1.LeaderID {
			if r0.LeaderID == c.nodes[2].id {
				t.Fatalf("the old member leads the restored cluster: %+v", r0)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no leader among the restored members: %+v %v, %+v %v", r0, err0, r1, err1)
		}
		time.Sleep(100 * time.Millisecond)
	}
	g, err := newClient(c.nodes[0].url).Get(context.Background(), connect.NewRequest(&fencedv1.GetRequest{Key: "backed-up"}))
	if err != nil || g.Msg.GetLastToken() == 0 || g.Msg.GetLastToken() > at {
		t.Fatalf("backed-up after the restore: %v %v; want the backup's last token (below %d)", g, err, at)
	}
	if tok := churn(t, c.nodes[0].url, "backed-up", 1); tok <= lost {
		t.Errorf("token %d after the restore, not above %d issued by the old cluster", tok, lost)
	}

	// Members restored from two different backups are two clusters.
	for i := range c.nodes {
		c.kill(i)
	}
	c.restoreNode(0, first)
	c.restoreNode(1, second)
	c.restoreNode(2, first)
	for i := range c.nodes {
		c.start(i)
	}
	c.waitLog(1, "another cluster", 20*time.Second)
	if r, err := c.role(1); err == nil && (r.Ready || (r.LeaderID != "" && r.LeaderID != c.nodes[1].id)) {
		t.Errorf("the member restored from another backup follows or leads: %+v", r)
	}
}
