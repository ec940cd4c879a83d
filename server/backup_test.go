package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	"github.com/fencedio/fenced/lease"
	"github.com/fencedio/fenced/server/internal/restore"
)

// freeLoopback returns a loopback address whose port was just free.
//
// The port is free only until the caller binds it, and outgoing loopback
// connections take their ports from 127.0.0.1's ephemeral range: a random
// address elsewhere in 127.0.0.0/8 keeps them from taking it meanwhile.
func freeLoopback(t *testing.T) string {
	t.Helper()
	ip := fmt.Sprintf("127.%d.%d.%d", 1+rand.IntN(254), rand.IntN(256), 1+rand.IntN(254))
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// A node restored from a backup issues tokens above every token the old
// node issued, also after the backup was taken, for keys in the backup
// and for new ones; it holds no lease of the backup, and the backup holds
// no lease ID.
func TestBackupRestoreTokens(t *testing.T) {
	ctx := context.Background()
	old := newTestServer(t, Config{})
	acquire := func(s *Server, key string) lease.Lease {
		t.Helper()
		l, err := s.Acquire(ctx, key, "o", time.Minute, 0)
		if err != nil {
			t.Fatalf("acquire %q: %v", key, err)
		}
		return l
	}
	release := func(s *Server, l lease.Lease) {
		t.Helper()
		if err := s.Release(ctx, l.Key, l.ID); err != nil {
			t.Fatal(err)
		}
	}
	held := acquire(old, "kept/held")
	release(old, acquire(old, "kept/freed"))
	var backup bytes.Buffer
	at, err := old.WriteBackup(&backup)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(backup.Bytes(), []byte(held.ID)) {
		t.Error("the backup holds a lease ID")
	}
	// The old node goes on after the backup; all this is lost with it.
	var lost uint64
	for i := range 40 {
		for _, key := range []string{"kept/freed", fmt.Sprintf("lost/%d", i)} {
			l := acquire(old, key)
			lost = max(lost, l.Token)
			release(old, l)
		}
	}
	old.Close()
	if lost <= at {
		t.Fatalf("tokens after the backup (%d) not above its index %d", lost, at)
	}

	const bump = 1000 // more than the ~160 entries written after the backup
	dir, raftAddr := t.TempDir(), freeLoopback(t)
	// A start floor below the bump's: the bump alone is under test here.
	start, err := RestoreBackup(RestoreConfig{DataDir: dir, NodeID: "r1", RaftAddress: raftAddr, Bump: bump, StartFloor: 1}, bytes.NewReader(backup.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if start != at+bump {
		t.Errorf("restored at %d, want %d+%d", start, at, bump)
	}
	if _, err := RestoreBackup(RestoreConfig{DataDir: dir, NodeID: "r1", RaftAddress: raftAddr}, bytes.NewReader(backup.Bytes())); !errors.Is(err, restore.ErrTarget) {
		t.Errorf("restore over a restored directory: %v, want restore.ErrTarget", err)
	}

	restored := newTestServer(t, Config{DataDir: dir, NodeID: "r1", RaftListen: raftAddr})
	restored.fsm.Read(func(st *lease.State) {
		if l, ok := st.Get("kept/held"); ok || st.LastToken("kept/held") != held.Token {
			t.Errorf("kept/held after the restore: lease %v, lastToken %d; want none and lastToken %d", l, st.LastToken("kept/held"), held.Token)
		}
	})
	if _, err := restored.Renew(ctx, "kept/held", held.ID); err == nil {
		t.Error("a lease of the backup was renewed after the restore")
	}
	for _, key := range []string{"kept/held", "kept/freed", "lost/3", "new"} {
		if l := acquire(restored, key); l.Token <= lost || l.Token <= start {
			t.Errorf("%q: token %d after the restore, not above %d issued after the backup and the start %d", key, l.Token, lost, start)
		}
	}
}

// RestoreConfig.Validate checks the configuration as RestoreBackup uses it,
// defaults filled in, without changing it.
func TestRestoreConfigValidateDoesNotMutate(t *testing.T) {
	ok := RestoreConfig{}
	if err := ok.Validate(); err != nil {
		t.Fatalf("zero config: %v", err)
	}
	if ok.DataDir != "" || ok.NodeID != "" || ok.RaftAddress != "" || ok.Bump != 0 || ok.MaxIdleKeys != 0 {
		t.Errorf("Validate changed the config: %+v", ok)
	}
	if d := ok.withDefaults(); d.NodeID != "node1" || d.Bump != lease.DefaultRestoreBump {
		t.Errorf("withDefaults: %+v", d)
	}
	// The default NodeID is checked against the cluster it must be in.
	bad := RestoreConfig{InitialCluster: []Peer{{ID: "other", Address: "127.0.0.1:7421"}}}
	if err := bad.Validate(); err == nil {
		t.Error("a NodeID (default node1) missing from InitialCluster was accepted")
	}
	// Members of several must be told one start floor: each picking its
	// own clock would start them at different indexes.
	three := RestoreConfig{NodeID: "a", InitialCluster: []Peer{{ID: "a", Address: "127.0.0.1:7421"},
		{ID: "b", Address: "127.0.0.1:7422"}, {ID: "c", Address: "127.0.0.1:7423"}}}
	if err := three.Validate(); !errors.Is(err, ErrRestoreStartFloor) {
		t.Errorf("three members without a start floor: %v, want ErrRestoreStartFloor", err)
	}
	three.StartFloor = 1
	if err := three.Validate(); err != nil {
		t.Errorf("three members with a start floor: %v", err)
	}
}

// Two clusters restored from one backup, one after the other, issue
// disjoint tokens, the later one above the earlier: the start is also at
// least the wall clock in microseconds, so a later restore starts above
// every token an earlier one issued (at fewer than one entry a
// microsecond).
func TestRestoringOneBackupTwiceIssuesDisjointTokens(t *testing.T) {
	ctx := context.Background()
	old := newTestServer(t, Config{})
	if _, err := old.Acquire(ctx, "k", "o", time.Minute, 0); err != nil {
		t.Fatal(err)
	}
	var backup bytes.Buffer
	if _, err := old.WriteBackup(&backup); err != nil {
		t.Fatal(err)
	}
	old.Close()

	var prevStart, prevMax uint64
	for i := range 2 {
		dir, raftAddr := t.TempDir(), freeLoopback(t)
		start, err := RestoreBackup(RestoreConfig{DataDir: dir, NodeID: "r1", RaftAddress: raftAddr}, bytes.NewReader(backup.Bytes()))
		if err != nil {
			t.Fatal(err)
		}
		if start <= prevMax {
			t.Fatalf("restore %d starts at %d, not above %d issued by the one before (which started at %d)", i+1, start, prevMax, prevStart)
		}
		s := newTestServer(t, Config{DataDir: dir, NodeID: "r1", RaftListen: raftAddr})
		for j := range 20 {
			l, err := s.Acquire(ctx, fmt.Sprintf("k%d", j%3), "o", time.Minute, 0)
			if err != nil {
				t.Fatal(err)
			}
			if l.Token <= start {
				t.Fatalf("token %d not above the start %d", l.Token, start)
			}
			prevMax = max(prevMax, l.Token)
			if err := s.Release(ctx, l.Key, l.ID); err != nil {
				t.Fatal(err)
			}
		}
		prevStart = start
		s.Close()
	}
}
