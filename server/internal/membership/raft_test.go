package membership

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/fencedio/fenced/server/internal/fsm"
	"github.com/fencedio/fenced/server/internal/peers"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// testNode is one raft node in memory, with its state machine and its
// identity in a temporary data directory.
type testNode struct {
	id    string
	raft  *raft.Raft
	addr  raft.ServerAddress
	fsm   *fsm.FSM
	store *raft.InmemStore
	ident *peers.IdentityStore
}

// newTestNode starts raft for node id, with nothing bootstrapped.
func newTestNode(t *testing.T, id string) *testNode {
	t.Helper()
	conf := raft.DefaultConfig()
	conf.LocalID = raft.ServerID(id)
	conf.HeartbeatTimeout = 50 * time.Millisecond
	conf.ElectionTimeout = 50 * time.Millisecond
	conf.LeaderLeaseTimeout = 50 * time.Millisecond
	conf.CommitTimeout = 5 * time.Millisecond
	conf.Logger = hclog.NewNullLogger()
	n := &testNode{id: id, fsm: fsm.New(100, fsm.Hooks{}), store: raft.NewInmemStore()}
	var trans *raft.InmemTransport
	n.addr, trans = raft.NewInmemTransport("")
	var err error
	if n.ident, err = peers.OpenIdentity(t.TempDir(), n.store, false); err != nil {
		t.Fatal(err)
	}
	if n.raft, err = raft.NewRaft(conf, n.fsm, n.store, n.store, raft.NewInmemSnapshotStore(), trans); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.raft.Shutdown().Error() })
	return n
}

func (n *testNode) formation(cfg Config) *Formation {
	return &Formation{Config: cfg, Ident: n.ident, Raft: n.raft, Local: n.addr, Log: quiet}
}

// newLeader starts node id as a bootstrapped cluster of one and waits
// until it leads.
func newLeader(t *testing.T, id string) *testNode {
	t.Helper()
	n := newTestNode(t, id)
	if form, err := n.formation(Config{NodeID: id}).Bootstrap(); err != nil || form {
		t.Fatalf("bootstrap a cluster of one: form %v, err %v", form, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for n.raft.State() != raft.Leader {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not become leader: %v", id, n.raft.State())
		}
		time.Sleep(5 * time.Millisecond)
	}
	return n
}

// servers returns the raft configuration's servers by ID.
func (n *testNode) servers(t *testing.T) map[string]raft.Server {
	t.Helper()
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		t.Fatal(err)
	}
	out := map[string]raft.Server{}
	for _, s := range f.Configuration().Servers {
		out[string(s.ID)] = s
	}
	return out
}
