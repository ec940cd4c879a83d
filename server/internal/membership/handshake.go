package membership

import (
	"fmt"
	"log/slog"

	"github.com/fencedio/fenced/server/internal/apierr"
	"github.com/fencedio/fenced/server/internal/peers"
	"github.com/hashicorp/raft"
)

// Handshake is the node as its peer port presents it (peers.Self): what
// it says of itself on every peer connection, and how it takes an
// admission.
type Handshake struct {
	Config Config
	Ident  *peers.IdentityStore // the member's identity in its data directory
	// Stable and Logs are raft's stores: whether raft has written
	// anything is read from them.
	Stable raft.StableStore
	Logs   raft.LogStore
	// Acks is what each peer acknowledged to this node; nil: no check.
	Acks *peers.Acks
	Log  *slog.Logger
}

var _ peers.Self = (*Handshake)(nil)

// Hello is what this node says of itself on every peer connection.
func (h *Handshake) Hello() peers.Hello {
	id := h.Ident.Get()
	last := h.lastPosition()
	return peers.Hello{Cluster: id.Cluster, Node: h.Config.NodeID, Instance: id.Instance, Votes: id.Votes,
		HasState: h.hasRaftState(), Joining: h.Config.Joining(), Initial: id.Initial,
		LastTerm: last.Term, LastIndex: last.Index}
}

// lastPosition is where this node's log ends; zero when it holds none.
func (h *Handshake) lastPosition() peers.Position {
	last, err := h.Logs.LastIndex()
	if err != nil || last == 0 {
		return peers.Position{}
	}
	var e raft.Log
	if err := h.Logs.GetLog(last, &e); err != nil {
		return peers.Position{}
	}
	return peers.Position{Term: e.Term, Index: e.Index}
}

// Checker refuses a peer that runs on a rolled-back data directory
// (peers.Acks).
func (h *Handshake) Checker() func(peers.Hello, string) error {
	if h.Acks == nil {
		return func(peers.Hello, string) error { return nil }
	}
	return h.Acks.Checker() // the peer port logs the refusal
}

// hasRaftState reports whether raft has written anything: a term or a log.
func (h *Handshake) hasRaftState() bool {
	term, _ := h.Stable.GetUint64([]byte("CurrentTerm"))
	last, _ := h.Logs.LastIndex()
	return term > 0 || last > 0
}

// Admit makes this node, waiting to be added, a voting member of the
// cluster of the node that adds it (fencectl member add).
func (h *Handshake) Admit(from peers.Hello) error {
	if from.Admit != h.Config.NodeID {
		return fmt.Errorf("%w: this is member %q, not %q", apierr.ErrMemberNotAddable, h.Config.NodeID, from.Admit)
	}
	if err := h.Ident.Join(from.Cluster, from.Initial); err != nil {
		return err
	}
	h.Log.Info("added to the cluster: this member votes from now on", "cluster_id", from.Cluster, "by", from.Node)
	return nil
}
