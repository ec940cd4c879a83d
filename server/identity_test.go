package server

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencedio/fenced/internal/testutil"
	"github.com/fencedio/fenced/server/internal/peers"
)

func identityConfig(t *testing.T, dir string, cfg Config) Config {
	cfg.DataDir = dir
	cfg.Listen = "127.0.0.1:0"
	setDefault(&cfg.RaftListen, "127.0.0.1:0")
	cfg.MinTTL, cfg.HeartbeatTimeout = 300*time.Millisecond, 100*time.Millisecond
	cfg.Logger = slog.New(slog.DiscardHandler)
	return cfg
}

// A member started on an empty data directory with existing does not
// bootstrap and does not vote, also after a restart, until it is added.
func TestExistingOnEmptyDirectoryDoesNotVote(t *testing.T) {
	self, other := testutil.MustFreeAddr(t), testutil.MustFreeAddr(t)
	dir := t.TempDir()
	cfg := identityConfig(t, dir, Config{NodeID: "n2", InitialClusterState: ClusterExisting, RaftListen: self,
		InitialCluster: []Peer{{ID: "n1", Address: other}, {ID: "n2", Address: self}}})
	for start := 1; start <= 2; start++ {
		s, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		r := s.Role()
		if r.Votes || r.ClusterID != "" || len(r.Members) != 0 {
			t.Errorf("start %d: role %+v: want no vote, no cluster ID and no configuration", start, r)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	cfg.InitialClusterState = "exisitng"
	if err := cfg.Validate(); err == nil {
		t.Error("a misspelt initial cluster state was accepted")
	}
}

// A cluster of one draws a cluster ID when it bootstraps and keeps it; a
// node bootstrapped on an empty directory again draws another.
func TestClusterIDDrawnAtBootstrap(t *testing.T) {
	dir := t.TempDir()
	var ids []string
	for _, wipe := range []bool{false, false, true} {
		if wipe {
			if err := os.RemoveAll(dir); err != nil {
				t.Fatal(err)
			}
		}
		s := newTestServer(t, identityConfig(t, dir, Config{}))
		r := s.Role()
		if !r.Votes || r.ClusterID == "" {
			t.Fatalf("role %+v: want a vote and a cluster ID", r)
		}
		ids = append(ids, r.ClusterID)
		s.Close()
	}
	if ids[0] != ids[1] {
		t.Errorf("the cluster ID changed across a restart: %s, then %s", ids[0], ids[1])
	}
	if ids[2] == ids[0] {
		t.Errorf("a wiped node drew the same cluster ID %s again", ids[0])
	}
	if _, err := os.Stat(filepath.Join(dir, peers.IdentityFileName)); err != nil {
		t.Error(err)
	}
}

// A node whose identity file survives but whose raft log was deleted, or
// replaced by another directory's, refuses to start rather than vote with
// a log that forgot what it acknowledged; the directory is left as it was.
func TestLostLogRefusesToStart(t *testing.T) {
	for _, tc := range []struct {
		name   string
		break_ func(t *testing.T, dir, other string)
	}{
		{"wal deleted", func(t *testing.T, dir, _ string) {
			if err := os.RemoveAll(filepath.Join(dir, "wal")); err != nil {
				t.Fatal(err)
			}
		}},
		{"wal and snapshots deleted", func(t *testing.T, dir, _ string) {
			for _, sub := range []string{"wal", "snapshots"} {
				if err := os.RemoveAll(filepath.Join(dir, sub)); err != nil {
					t.Fatal(err)
				}
			}
		}},
		{"another directory's wal", func(t *testing.T, dir, other string) {
			if err := os.RemoveAll(filepath.Join(dir, "wal")); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(filepath.Join(other, "wal"), filepath.Join(dir, "wal")); err != nil {
				t.Fatal(err)
			}
		}},
		{"identity file deleted", func(t *testing.T, dir, _ string) {
			if err := os.Remove(filepath.Join(dir, peers.IdentityFileName)); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, other := t.TempDir(), t.TempDir()
			for _, d := range []string{dir, other} {
				s := newTestServer(t, identityConfig(t, d, Config{}))
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
			}
			tc.break_(t, dir, other)
			before, _ := os.ReadFile(filepath.Join(dir, peers.IdentityFileName))
			s, err := New(identityConfig(t, dir, Config{}))
			if err == nil {
				s.Close()
				t.Fatal("the node started")
			}
			if !errors.Is(err, peers.ErrLostLog) || !strings.Contains(err.Error(), "fencectl member remove") {
				t.Fatalf("start: %v, want ErrLostLog with the recovery", err)
			}
			if after, _ := os.ReadFile(filepath.Join(dir, peers.IdentityFileName)); string(after) != string(before) {
				t.Errorf("the refused start rewrote the identity: %s -> %s", before, after)
			}
		})
	}
}
