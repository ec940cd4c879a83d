package server

import (
	"log/slog"
	"os"
	"path/filepath"
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
