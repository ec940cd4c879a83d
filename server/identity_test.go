package server

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencedio/fenced/internal/testutil"
	"github.com/fencedio/fenced/server/internal/peers"
	"github.com/hashicorp/raft"
)

// peerMuxOf listens on a peer port of a node that says nothing of itself.
func peerMuxOf(t *testing.T) *peers.Mux {
	t.Helper()
	m, err := peers.Listen("127.0.0.1:0", "", nil, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// A member that may not vote refuses vote and pre-vote requests before
// raft sees them, refuses a leadership handover, and asks for no votes;
// log replication reaches raft. Once added, it votes.
func TestMemberWithoutVoteStaysOutOfElections(t *testing.T) {
	var votes atomic.Bool
	mux := peerMuxOf(t)
	ct := newContactTransport(raft.NewNetworkTransport(mux, 2, 5*time.Second, io.Discard), votes.Load)
	t.Cleanup(func() { ct.Close() })
	consumer := ct.Consumer()
	peer := raft.NewNetworkTransport(peerMuxOf(t), 2, 5*time.Second, io.Discard)
	t.Cleanup(func() { peer.Close() })
	target := raft.ServerAddress(mux.Addr().String())

	// What reaches raft: answered here as raft would grant.
	go func() {
		for rpc := range consumer {
			switch rpc.Command.(type) {
			case *raft.RequestVoteRequest:
				rpc.Respond(&raft.RequestVoteResponse{Granted: true}, nil)
			case *raft.AppendEntriesRequest:
				rpc.Respond(&raft.AppendEntriesResponse{Success: true}, nil)
			default:
				rpc.Respond(nil, errors.New("unexpected"))
			}
		}
	}()
	header := raft.RPCHeader{ID: []byte("n1"), Addr: []byte("127.0.0.1:1")}
	var vote raft.RequestVoteResponse
	if err := peer.RequestVote("n2", target, &raft.RequestVoteRequest{RPCHeader: header, Term: 7}, &vote); err != nil || vote.Granted {
		t.Errorf("vote request to a member that may not vote: granted=%v, %v", vote.Granted, err)
	}
	var pre raft.RequestPreVoteResponse
	if err := peer.RequestPreVote("n2", target, &raft.RequestPreVoteRequest{RPCHeader: header, Term: 7}, &pre); err != nil || pre.Granted {
		t.Errorf("pre-vote request: granted=%v, %v", pre.Granted, err)
	}
	if err := peer.TimeoutNow("n2", target, &raft.TimeoutNowRequest{RPCHeader: header}, &raft.TimeoutNowResponse{}); err == nil {
		t.Error("a leadership handover to a member that may not vote was accepted")
	}
	var app raft.AppendEntriesResponse
	if err := peer.AppendEntries("n2", target, &raft.AppendEntriesRequest{RPCHeader: header, Term: 7}, &app); err != nil || !app.Success {
		t.Errorf("log replication to a member that may not vote: %+v, %v", app, err)
	}
	if err := ct.RequestVote("n1", raft.ServerAddress(peerMuxOf(t).Addr().String()), &raft.RequestVoteRequest{}, &raft.RequestVoteResponse{}); !errors.Is(err, errNoVote) {
		t.Errorf("a member that may not vote asked for a vote: %v", err)
	}

	votes.Store(true)
	vote = raft.RequestVoteResponse{}
	if err := peer.RequestVote("n2", target, &raft.RequestVoteRequest{RPCHeader: header, Term: 8}, &vote); err != nil || !vote.Granted {
		t.Errorf("vote request once added: granted=%v, %v", vote.Granted, err)
	}
}

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
