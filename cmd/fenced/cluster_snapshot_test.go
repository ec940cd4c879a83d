package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/api/fenced/v1/fencedv1connect"
	"github.com/fencedio/fenced/internal/testutil"
	"github.com/fencedio/fenced/server"
)

// snapshotArgs make a cluster snapshot and compact its log within a second
// of a few dozen entries.
var snapshotArgs = []string{"--snapshot-threshold", "32", "--snapshot-interval", "50ms", "--snapshot-trailing-logs", "8"}

// churn acquires and releases key n times through url and returns the last
// token.
func churn(t *testing.T, url, key string, n int) uint64 {
	t.Helper()
	ctx := context.Background()
	rpc := newClient(url)
	var last uint64
	// On a starved machine the leader may step down mid-churn: a call then
	// answers unavailable, and its outcome is unknown. The next Acquire
	// waits out a grant that may have been made (WaitMs above the TTL), and a
	// release that may not have been made expires. Any other error fails.
	for range n {
		var a *connect.Response[fencedv1.AcquireResponse]
		var err error
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			a, err = rpc.Acquire(ctx, connect.NewRequest(&fencedv1.AcquireRequest{Key: key, Owner: "churn", TtlMs: 10_000, WaitMs: 15_000}))
			if err == nil || connect.CodeOf(err) != connect.CodeUnavailable || time.Now().After(deadline) {
				break
			}
		}
		if err != nil {
			t.Fatalf("acquire %q: %v", key, err)
		}
		last = a.Msg.GetLease().GetToken()
		_, err = rpc.Release(ctx, connect.NewRequest(&fencedv1.ReleaseRequest{Key: key, LeaseId: a.Msg.GetLease().GetLeaseId()}))
		if err != nil && connect.CodeOf(err) != connect.CodeUnavailable {
			t.Fatalf("release %q: %v", key, err)
		}
	}
	return last // the last grant is the highest token of key
}

// hasSnapshot reports whether the data directory holds a raft snapshot.
func hasSnapshot(dataDir string) bool {
	entries, _ := os.ReadDir(filepath.Join(dataDir, "snapshots"))
	return len(entries) > 0
}

// TestClusterNewMemberFromSnapshot adds a node to a cluster whose log was
// compacted past its start: the new member cannot replay the log from the
// beginning and catches up from the leader's snapshot.
func TestClusterNewMemberFromSnapshot(t *testing.T) {
	c := newStoppedCluster(t, 3)
	for i, nd := range c.nodes {
		nd.extraArgs = snapshotArgs
		c.start(i)
	}
	leader := c.waitLeader(20 * time.Second)
	last := churn(t, c.nodes[leader].url, "churned", 100)
	for deadline := time.Now().Add(10 * time.Second); !hasSnapshot(c.nodes[leader].dataDir); {
		if time.Now().After(deadline) {
			t.Fatal("the leader took no snapshot within 10s of 200 entries")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Snapshots happen between entries; more churn makes sure the log of
	// the first entries is gone.
	last = churn(t, c.nodes[leader].url, "churned", 50)

	n4 := &clusterNode{id: "n4", api: testutil.MustFreeAddr(t), raft: testutil.MustFreeAddr(t), dataDir: filepath.Join(t.TempDir(), "data"), extraArgs: snapshotArgs}
	n4.url = "http://" + n4.api
	c.nodes = append(c.nodes, n4)
	c.startJoining(3)
	admin := fencedv1connect.NewClusterServiceClient(http.DefaultClient, c.nodes[leader].url)
	ctx := context.Background()
	for deadline := time.Now().Add(10 * time.Second); ; {
		_, err := admin.AddMember(ctx, connect.NewRequest(&fencedv1.AddMemberRequest{Id: "n4", Address: n4.raft}))
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("add n4: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	commit := stats(t, c.nodes[leader].url).CommitIndex
	for deadline := time.Now().Add(20 * time.Second); ; {
		if st, err := fetchStats(n4.url); err == nil && st.AppliedIndex >= commit {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("n4 did not catch up within 20s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !hasSnapshot(n4.dataDir) {
		t.Error("n4 caught up without installing a snapshot: the log was not compacted")
	}
	stale := connect.NewRequest(&fencedv1.GetRequest{Key: "churned"})
	stale.Header().Set("Fenced-Stale-Read", "true")
	g, err := newClient(n4.url).Get(ctx, stale)
	if err != nil || g.Msg.GetLastToken() != last {
		t.Errorf("n4's own state of \"churned\": %v %v, want lastToken %d", g, err, last)
	}
}

// TestClusterBackupRestore backs up a 3-node cluster, lets it issue more
// tokens, loses it, and starts a new 3-node cluster from the backup with
// fenced restore: every token the new cluster issues, for a key of the
// backup, a key first acquired after it and a new key, exceeds every token
// the old cluster issued.
func TestClusterBackupRestore(t *testing.T) {
	old := newTestCluster(t, 3)
	leader := old.waitLeader(20 * time.Second)
	url := old.nodes[leader].url
	churn(t, url, "backed-up", 10)
	resp, err := http.Get(url + "/v1/backup")
	if err != nil {
		t.Fatal(err)
	}
	backup, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/backup: %v %v", resp.Status, err)
	}
	at, _ := strconv.ParseUint(resp.Header.Get(server.BackupIndexHeader), 10, 64)
	// Issued after the backup, then lost with the old cluster.
	lost := max(churn(t, url, "backed-up", 50), churn(t, url, "after-backup", 50))
	if lost <= at {
		t.Fatalf("tokens after the backup (%d) not above its index %d", lost, at)
	}
	for i := range old.nodes {
		old.kill(i)
	}
	file := filepath.Join(t.TempDir(), "backup.fenced")
	if err := os.WriteFile(file, backup, 0o600); err != nil {
		t.Fatal(err)
	}

	const bump = 10_000 // far more than the ~200 entries written after the backup
	c := newStoppedCluster(t, 3)
	for _, nd := range c.nodes {
		// A start floor below the bump's: the bump alone is under test.
		out, err := exec.Command(c.bin, "restore", "--from", file, "--data-dir", nd.dataDir, "--node-id", nd.id,
			"--initial-cluster", c.ic, "--bump", strconv.Itoa(bump), "--start-floor", "1").CombinedOutput()
		if err != nil {
			t.Fatalf("fenced restore %s: %v\n%s", nd.id, err, out)
		}
		if want := fmt.Sprintf("above %d", at+bump); !bytes.Contains(out, []byte(want)) {
			t.Errorf("fenced restore said %q, want %q", out, want)
		}
	}
	for i := range c.nodes {
		c.start(i)
	}
	newLeader := c.waitLeader(20 * time.Second)
	ctx := context.Background()
	for i, key := range []string{"backed-up", "after-backup", "new"} {
		a, err := newClient(c.nodes[(newLeader+i)%3].url).Acquire(ctx, connect.NewRequest(&fencedv1.AcquireRequest{Key: key, Owner: "x", TtlMs: 10_000}))
		if err != nil {
			t.Fatalf("acquire %q after the restore: %v", key, err)
		}
		if tok := a.Msg.GetLease().GetToken(); tok <= lost || tok <= at+bump {
			t.Errorf("%q: token %d after the restore, not above %d issued after the backup (start %d)", key, tok, lost, at+bump)
		}
	}
	// Restoring over a member's directory is refused.
	out, err := exec.Command(c.bin, "restore", "--from", file, "--data-dir", c.nodes[0].dataDir+"-other", "--node-id", "n1",
		"--initial-cluster", c.ic, "--start-floor", "1").CombinedOutput()
	if err != nil {
		t.Fatalf("restore into a fresh directory: %v\n%s", err, out)
	}
	c.kill(0)
	<-c.nodes[0].p.exited
	if out, err := exec.Command(c.bin, "restore", "--from", file, "--data-dir", c.nodes[0].dataDir, "--node-id", "n1",
		"--initial-cluster", c.ic, "--start-floor", "1").CombinedOutput(); err == nil || !bytes.Contains(out, []byte("already holds raft state")) {
		t.Errorf("restore over a member's data directory: %v\n%s", err, out)
	}
}
