package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencedio/fenced/internal/testutil"
	"github.com/hashicorp/raft"
)

// fakeSelf is a peer port's node with a fixed hello.
type fakeSelf struct{ h peerHello }

func (f *fakeSelf) hello() peerHello { return f.h }
func (f *fakeSelf) admit(from peerHello) error {
	f.h.Cluster, f.h.Votes = from.Cluster, true
	return nil
}

func peerMuxOf(t *testing.T, cluster string) *peerMux {
	t.Helper()
	return peerMuxLogging(t, cluster, slog.New(slog.DiscardHandler))
}

func peerMuxLogging(t *testing.T, cluster string, log *slog.Logger) *peerMux {
	t.Helper()
	m, err := listenPeers("127.0.0.1:0", "", nil, log, &fakeSelf{peerHello{Cluster: cluster, Node: "node-" + cluster}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// Every peer connection, raft's and forwarded calls alike, is refused
// between two members whose cluster IDs differ, on both ends; a member
// with no cluster ID yet (waiting to be added) is refused by nobody.
func TestPeerConnectionsCheckClusterID(t *testing.T) {
	for _, tc := range []struct {
		name, dialer, listener string
		refused                bool
	}{
		{"same cluster", "c1", "c1", false},
		{"other cluster", "c1", "c2", true},
		{"dialer waits to be added", "", "c1", false},
		{"listener waits to be added", "c1", "", false},
	} {
		for _, kind := range []byte{peerRaft, peerAPI} {
			t.Run(tc.name+"/"+string(kind), func(t *testing.T) {
				var logged syncBuffer
				from, to := peerMuxOf(t, tc.dialer), peerMuxLogging(t, tc.listener, slog.New(slog.NewTextHandler(&logged, nil)))
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				c, err := from.dial(ctx, to.Addr().String(), kind)
				if tc.refused {
					var mismatch *ClusterMismatchError
					if !errors.As(err, &mismatch) || !errors.Is(err, ErrClusterMismatch) || mismatch.PeerCluster != tc.listener {
						t.Fatalf("dial across clusters: %v, want a ClusterMismatchError naming %q", err, tc.listener)
					}
					select {
					case in := <-to.raftConns:
						in.Close()
						t.Fatal("a refused connection was handed to raft")
					case in := <-to.apiConns:
						in.Close()
						t.Fatal("a refused connection was handed to the forwarded-call server")
					case <-time.After(100 * time.Millisecond):
					}
					if got := logged.String(); !strings.Contains(got, "peer connection refused") || !strings.Contains(got, "another cluster") {
						t.Errorf("the listener logged %q, want the refusal and its reason", got)
					}
					return
				}
				if err != nil {
					t.Fatalf("dial: %v", err)
				}
				defer c.Close()
				var in net.Conn
				if kind == peerRaft {
					in, err = to.Accept()
				} else {
					in, err = to.apiListener().Accept()
				}
				if err != nil {
					t.Fatal(err)
				}
				defer in.Close()
				if _, err := c.Write([]byte("x")); err != nil {
					t.Fatal(err)
				}
				b := make([]byte, 1)
				in.SetReadDeadline(time.Now().Add(5 * time.Second))
				if _, err := io.ReadFull(in, b); err != nil || b[0] != 'x' {
					t.Fatalf("the accepted connection read %q, %v", b, err)
				}
			})
		}
	}
}

// A member that may not vote refuses vote and pre-vote requests before
// raft sees them, refuses a leadership handover, and asks for no votes;
// log replication reaches raft. Once added, it votes.
func TestMemberWithoutVoteStaysOutOfElections(t *testing.T) {
	var votes atomic.Bool
	mux := peerMuxOf(t, "")
	ct := newContactTransport(raft.NewNetworkTransport(mux, 2, 5*time.Second, io.Discard), votes.Load)
	t.Cleanup(func() { ct.Close() })
	consumer := ct.Consumer()
	peer := raft.NewNetworkTransport(peerMuxOf(t, ""), 2, 5*time.Second, io.Discard)
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
	if err := ct.RequestVote("n1", raft.ServerAddress(peerMuxOf(t, "").Addr().String()), &raft.RequestVoteRequest{}, &raft.RequestVoteResponse{}); !errors.Is(err, errNoVote) {
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
	if _, err := os.Stat(filepath.Join(dir, identityFileName)); err != nil {
		t.Error(err)
	}
}

// syncBuffer collects what a logger writes from other goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
