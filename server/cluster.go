package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/fencedio/fenced/api/fenced/v1/fencedv1connect"
	"github.com/fencedio/fenced/server/internal/contact"
	"github.com/fencedio/fenced/server/internal/forward"
	"github.com/fencedio/fenced/server/internal/membership"
	"github.com/fencedio/fenced/server/internal/peers"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// Clusters
//
// A cluster is formed the way etcd forms one, from the same list of
// members on every node (Config.InitialCluster, fenced --initial-cluster
// n1=HOST:PORT,n2=...), or joined by a node that waits to be added
// (Config.Join, fencectl member add): internal/membership forms and joins
// clusters, serves ClusterService and publishes the members' client URLs;
// this file gives it the node's parts.
//
// Timing rules. Everything derives from Config.HeartbeatTimeout (H):
//
//   - raft's heartbeat and election timeouts are H: a follower that hears
//     nothing from the leader for a random time between H and 2H stands for
//     election, so a dead leader is replaced after about H to 2H plus one
//     vote round trip and one fsync;
//   - raft's leader lease is H/2: a leader that has not heard from a quorum
//     for H/2 steps down, before any follower can have stood for election
//     (H), so two nodes never both believe they lead for long. Renewals do not
//     rely on it: each one is acknowledged only after a leadership check that
//     began after it arrived (leadercheck.Check);
//   - a new leader gives every lease a fresh full TTL before it may expire
//     anything, so a lease renewed by the old leader cannot be expired early
//     by the new one;
//   - MinTTL must exceed H/2, the longest a leadership check waits, or a
//     renewal could not keep a lease; in a cluster MinTTL must also be at
//     least 2H, so that the shortest lease outlives the detection of a dead
//     leader. Validate refuses configurations that break these rules.
//
// A holder survives a failover when the time between its last successful
// renewal and its local deadline (2/3 of the TTL with the client's default
// renewal every TTL/3) exceeds the failover time, about 2H plus a vote and
// an fsync: with the defaults (H = 500ms) leases of 3s and more survive the
// loss of the leader; the client's default TTL of 10s has a wide margin.

// Peer is one member of a cluster: its node ID and the raft address the
// other members dial.
type Peer = membership.Peer

// Role is what GET /v1/role answers: this node's place in the cluster.
type Role = membership.Role

// Member is one server of the raft configuration.
type Member = membership.Member

// ParseInitialCluster parses "id=host:port,id=host:port,...".
func ParseInitialCluster(s string) ([]Peer, error) { return membership.ParseInitialCluster(s) }

// membership returns the configuration values membership reads.
func (c *Config) membership() membership.Config {
	return membership.Config{
		NodeID: c.NodeID, InitialCluster: c.InitialCluster,
		Join: c.Join, Existing: c.InitialClusterState == ClusterExisting,
		RaftListen: c.RaftListen, RaftAdvertise: c.RaftAdvertise, DataDir: c.DataDir,
		MinTTL: c.MinTTL, HeartbeatTimeout: c.HeartbeatTimeout,
	}
}

// validateCluster checks InitialCluster against NodeID and RaftListen, and
// the timing rules above. An empty RaftListen has become this node's address
// in the list by then (withDefaults).
func (c *Config) validateCluster() error { return c.membership().Validate() }

// advertisedRaftAddress is the address peers dial to reach this node:
// RaftAdvertise, its address in the initial cluster, or "" for the address
// it listens on.
func (c *Config) advertisedRaftAddress() string { return c.membership().AdvertisedRaftAddress() }

// newTransport listens on the peer port: raft's connections and forwarded
// API calls share it (internal/peers).
func (s *Server) newTransport(hlog hclog.Logger) (*contact.Transport, error) {
	self := &membership.Handshake{Config: s.cfg.membership(), Ident: s.ident, Stable: s.store, Logs: s.raftLogs, Acks: s.acks, Log: s.log}
	mux, err := peers.Listen(s.cfg.RaftListen, s.cfg.advertisedRaftAddress(), s.sec.Peer, s.log, self)
	if err != nil {
		return nil, fmt.Errorf("raft listen %s: %w", s.cfg.RaftListen, err)
	}
	s.peers = mux
	if s.sec.Peer == nil && s.sec.Policy() != nil {
		s.log.Warn("the peer port is plaintext and unauthenticated: whoever reaches it can forward calls in any principal's name; "+
			"keep it on a network only the nodes reach, or set --peer-cert-file, --peer-key-file and --peer-trusted-ca-file",
			"raft_listen", mux.ListenAddr().String())
	}
	return contact.New(raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: mux, MaxPool: 3, Timeout: 10 * time.Second, Logger: hlog,
	}), s.ident.Votes, func(id raft.ServerID, term, index uint64) {
		s.acks.Note(string(id), peers.Position{Term: term, Index: index})
	}), nil
}

// formation forms or joins this node's cluster (membership.Formation).
func (s *Server) formation() *membership.Formation {
	return &membership.Formation{Config: s.cfg.membership(), Ident: s.ident, Raft: s.raft, Local: s.trans.LocalAddr(),
		Status: s.peers.Status, Log: s.log}
}

// bootstrap starts a new cluster from the initial cluster, or a cluster of
// one; a node told to join waits instead to be added by a leader. A new
// cluster of several forms in the background once every member answered.
func (s *Server) bootstrap() error {
	f := s.formation()
	form, err := f.Bootstrap()
	if err != nil || !form {
		return err
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := f.Form(s.ctx); err != nil {
			s.stop(fmt.Errorf("bootstrap: %w", err))
		}
	}()
	return nil
}

// noteExistingState says that the initial cluster is ignored on restart,
// and that a member waiting to be added back does not vote.
func (s *Server) noteExistingState() { s.formation().NoteExistingState() }

// clusterService serves ClusterService (membership.Service).
func (s *Server) clusterService() *membership.Service {
	return &membership.Service{Raft: s.raft, NodeID: s.cfg.NodeID, Peers: s.peers, Forward: clusterForwarding{s},
		ClientURLs: s.fsm.ClientURLs, Refused: s.acks.Refused, Log: s.log}
}

// clusterForwarding is the node's forwarder as ClusterService uses it.
type clusterForwarding struct{ s *Server }

func (f clusterForwarding) Leader(ctx context.Context, h http.Header, here bool) (fencedv1connect.ClusterServiceClient, error) {
	addr, err := f.s.forward.LeaderFor(ctx, h, here)
	if err != nil || addr == "" {
		return nil, err
	}
	return f.s.forward.ClusterClient(addr), nil
}

func (f clusterForwarding) Name(ctx context.Context, h http.Header) { f.s.nameForwarded(ctx, h) }

func (f clusterForwarding) Unreached(ctx context.Context, err error) error {
	return forward.Unreached(ctx, err)
}

// Role returns this node's role and the cluster's membership.
func (s *Server) Role() Role {
	r := membership.RaftRole(s.raft, s.cfg.NodeID, s.fsm.ClientURLs)
	r.Ready = s.Ready()
	r.ClusterID, r.Votes = s.ident.Get().Cluster, s.ident.Votes()
	r.RolledBack = s.acks.Refused()
	r.ClientURL = s.clientURL()
	return r
}

func (s *Server) serveRole(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(s.Role())
}

// canServe reports whether this node can serve acquisitions: it is the
// ready leader, or a follower that heard from a leader recently enough to
// forward to it.
func (s *Server) canServe() bool {
	if s.Ready() {
		return true
	}
	if s.raft.State() != raft.Follower {
		return false
	}
	addr, _ := s.raft.LeaderWithID()
	return addr != "" && time.Since(s.raft.LastContact()) < 2*s.cfg.HeartbeatTimeout
}
