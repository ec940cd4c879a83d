package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/fencedio/fenced/internal/failpoint"
	"github.com/fencedio/fenced/server/internal/apierr"
	"github.com/fencedio/fenced/server/internal/contact"
	"github.com/fencedio/fenced/server/internal/peers"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// Clusters
//
// A cluster is formed the way etcd forms one: every node starts with the
// same list of members and their raft addresses (Config.InitialCluster,
// fenced --initial-cluster n1=HOST:PORT,n2=...), and its own name in it
// (Config.NodeID). A node whose data directory holds no raft state
// bootstraps with that list once every other member in it has answered
// (internal/peers/identity.go: a member that lost its data directory must not form the
// cluster again); the nodes elect a leader once a majority runs. A node
// restarted on its data directory rejoins with the membership stored there
// and ignores the list. With no list, a node is a cluster of one, as it
// always was. A node started with Join, or InitialClusterState
// "existing", on an empty data directory waits to be added (fencectl member
// add) and does not vote until it is.
//
// A member that lost its data directory comes back as a new member:
// fencectl member remove ID; empty its data directory; start it with
// --join; fencectl member add ID RAFTHOST:PORT.
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
type Peer struct {
	ID      string
	Address string
}

// ParseInitialCluster parses "id=host:port,id=host:port,...".
func ParseInitialCluster(s string) ([]Peer, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	var peers []Peer
	for _, item := range strings.Split(s, ",") {
		id, addr, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok || id == "" || addr == "" {
			return nil, fmt.Errorf("initial cluster: %q is not ID=HOST:PORT", item)
		}
		peers = append(peers, Peer{ID: id, Address: addr})
	}
	return peers, nil
}

// String formats peers as ParseInitialCluster reads them.
func formatPeers(peers []Peer) string {
	parts := make([]string, len(peers))
	for i, p := range peers {
		parts[i] = p.ID + "=" + p.Address
	}
	return strings.Join(parts, ",")
}

// validateCluster checks InitialCluster against NodeID and RaftListen, and
// the timing rules above. An empty RaftListen has become this node's address
// in the list by then (withDefaults).
func (c *Config) validateCluster() error {
	var errs []error
	if c.Join && len(c.InitialCluster) > 0 {
		return errors.New("config: Join and InitialCluster exclude each other: a joining node is added by the cluster's leader")
	}
	if len(c.InitialCluster) == 0 {
		return nil
	}
	ids := map[string]bool{}
	addrs := map[string]string{}
	var self *Peer
	for i, p := range c.InitialCluster {
		if ids[p.ID] {
			errs = append(errs, fmt.Errorf("config: node %q appears twice in the initial cluster", p.ID))
		}
		ids[p.ID] = true
		host, port, err := net.SplitHostPort(p.Address)
		if err != nil {
			errs = append(errs, fmt.Errorf("config: initial cluster: node %q address %q: %w", p.ID, p.Address, err))
			continue
		}
		if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
			errs = append(errs, fmt.Errorf("config: initial cluster: node %q address %q: peers cannot dial it, give a host", p.ID, p.Address))
		}
		if port == "0" {
			errs = append(errs, fmt.Errorf("config: initial cluster: node %q address %q needs a fixed port", p.ID, p.Address))
		}
		if other, dup := addrs[p.Address]; dup {
			errs = append(errs, fmt.Errorf("config: initial cluster: nodes %q and %q share the address %s", other, p.ID, p.Address))
		}
		addrs[p.Address] = p.ID
		if p.ID == c.NodeID {
			self = &c.InitialCluster[i]
		}
	}
	if self == nil {
		errs = append(errs, fmt.Errorf("config: this node's ID %q is not in the initial cluster %s: set the node ID to one of them",
			c.NodeID, formatPeers(c.InitialCluster)))
	} else {
		if c.RaftAdvertise != "" && c.RaftAdvertise != self.Address {
			errs = append(errs, fmt.Errorf("config: node %q advertises the raft address %s but has %s in the initial cluster: peers would dial the wrong one",
				c.NodeID, c.RaftAdvertise, self.Address))
		}
		if c.RaftAdvertise == "" && !sameListenAddress(c.RaftListen, self.Address) {
			errs = append(errs, fmt.Errorf("config: node %q has the raft address %s in the initial cluster but listens on %s: peers would not reach it",
				c.NodeID, self.Address, c.RaftListen))
		}
	}
	if len(c.InitialCluster) > 1 && c.MinTTL < 2*c.HeartbeatTimeout {
		errs = append(errs, fmt.Errorf("config: in a cluster MinTTL %v must be at least twice the HeartbeatTimeout %v, so that every lease outlives the detection of a dead leader",
			c.MinTTL, c.HeartbeatTimeout))
	}
	return errors.Join(errs...)
}

// sameListenAddress reports whether listening on listen serves advertised:
// the same address, or the same port on every interface.
func sameListenAddress(listen, advertised string) bool {
	if listen == advertised {
		return true
	}
	lh, lp, err1 := net.SplitHostPort(listen)
	_, ap, err2 := net.SplitHostPort(advertised)
	if err1 != nil || err2 != nil || lp != ap {
		return false
	}
	ip := net.ParseIP(lh)
	return lh == "" || (ip != nil && ip.IsUnspecified())
}

// advertisedRaftAddress is the address peers dial to reach this node:
// RaftAdvertise, its address in the initial cluster, or "" for the address
// it listens on.
func (c *Config) advertisedRaftAddress() string {
	if c.RaftAdvertise != "" {
		return c.RaftAdvertise
	}
	for _, p := range c.InitialCluster {
		if p.ID == c.NodeID {
			return p.Address
		}
	}
	return ""
}

// newTransport listens on the peer port: raft's connections and forwarded
// API calls share it (internal/peers).
func (s *Server) newTransport(hlog hclog.Logger) (*contact.Transport, error) {
	mux, err := peers.Listen(s.cfg.RaftListen, s.cfg.advertisedRaftAddress(), s.sec.Peer, s.log, peerSelf{s})
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
	}), s.ident.Votes), nil
}

// joining reports whether this node, on an empty data directory, waits to
// be added to a running cluster.
func (s *Server) joining() bool {
	return s.cfg.Join || s.cfg.InitialClusterState == ClusterExisting
}

// peerSelf is the node as its peer port presents it.
type peerSelf struct{ s *Server }

func (p peerSelf) Hello() peers.Hello           { return p.s.hello() }
func (p peerSelf) Admit(from peers.Hello) error { return p.s.admit(from) }

// hello is what this node says of itself on every peer connection.
func (s *Server) hello() peers.Hello {
	id := s.ident.Get()
	return peers.Hello{Cluster: id.Cluster, Node: s.cfg.NodeID, Instance: id.Instance, Votes: id.Votes,
		HasState: s.hasRaftState(), Joining: s.joining(), Initial: id.Initial}
}

// hasRaftState reports whether raft has written anything: a term or a log.
func (s *Server) hasRaftState() bool {
	term, _ := s.store.GetUint64([]byte("CurrentTerm"))
	last, _ := s.raftLogs.LastIndex()
	return term > 0 || last > 0
}

// admit makes this node, waiting to be added, a voting member of the
// cluster of the node that adds it (fencectl member add).
func (s *Server) admit(from peers.Hello) error {
	if from.Admit != s.cfg.NodeID {
		return fmt.Errorf("%w: this is member %q, not %q", apierr.ErrMemberNotAddable, s.cfg.NodeID, from.Admit)
	}
	if err := s.ident.Join(from.Cluster, from.Initial); err != nil {
		return err
	}
	s.log.Info("added to the cluster: this member votes from now on", "cluster_id", from.Cluster, "by", from.Node)
	return nil
}

// bootstrap starts a new cluster from the initial cluster, or a cluster of
// one; a node told to join waits instead to be added by a leader.
func (s *Server) bootstrap() error {
	me := s.ident.Get()
	switch {
	case failpoint.Enabled(failpoint.SilentRebootstrap) && !s.joining():
		me.Votes = true
		if err := s.ident.Save(me); err != nil {
			return err
		}
		return s.bootstrapRaft()
	case s.joining():
		s.log.Info("no raft state: waiting to be added to a cluster (fencectl member add); this member does not vote until then",
			"node_id", s.cfg.NodeID, "raft_address", string(s.trans.LocalAddr()))
		return nil
	case len(s.cfg.InitialCluster) <= 1:
		initial := map[string]string{s.cfg.NodeID: me.Instance}
		if err := s.ident.Join(peers.FormationID(initial), initial); err != nil {
			return err
		}
		return s.bootstrapRaft()
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.form(); err != nil {
			s.stop(fmt.Errorf("bootstrap: %w", err))
		}
	}()
	return nil
}

func (s *Server) bootstrapRaft() error {
	err := s.raft.BootstrapCluster(s.bootstrapServers()).Error()
	if err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
		return fmt.Errorf("bootstrap: %w", err)
	}
	return nil
}

// formRetry is how often a forming member asks the peers that have not
// answered yet.
const formRetry = 250 * time.Millisecond

// form asks every other initial member for its state until each has
// answered, then bootstraps the new cluster; or joins the cluster a peer
// already formed with this member's instance among the initial ones; or
// refuses, when a peer belongs to a cluster that counts this member with
// another data directory.
func (s *Server) form() error {
	me := s.ident.Get()
	seen := map[string]string{s.cfg.NodeID: me.Instance}
	var lastNote time.Time
	tick := time.NewTicker(formRetry)
	defer tick.Stop()
	for {
		if s.ident.Votes() {
			return nil // added by a leader meanwhile
		}
		var missing []string
		for _, p := range s.cfg.InitialCluster {
			if _, ok := seen[p.ID]; ok {
				continue
			}
			ctx, cancel := context.WithTimeout(s.ctx, peers.HandshakeTimeout)
			st, err := s.peers.Status(ctx, p.Address)
			cancel()
			switch {
			case errors.Is(err, peers.ErrClusterMismatch):
				return err
			case err != nil:
				missing = append(missing, p.ID)
				continue
			case st.Node != p.ID:
				return fmt.Errorf("the initial cluster names %s %s, but the node there is %q: check --initial-cluster", p.ID, p.Address, st.Node)
			case st.Votes || st.HasState:
				if st.Initial[s.cfg.NodeID] != me.Instance {
					return &peers.MemberBootstrappedError{Node: s.cfg.NodeID, Address: string(s.trans.LocalAddr()), Peer: p.ID + " (" + p.Address + ")"}
				}
				if err := s.ident.Join(st.Cluster, st.Initial); err != nil {
					return err
				}
				return s.bootstrapRaft()
			}
			seen[p.ID] = st.Instance
		}
		if len(missing) == 0 {
			if err := s.ident.Join(peers.FormationID(seen), seen); err != nil {
				return err
			}
			s.log.Info("every initial member answered: bootstrapping a new cluster", "cluster_id", s.ident.Get().Cluster)
			return s.bootstrapRaft()
		}
		if time.Since(lastNote) > 10*time.Second {
			lastNote = time.Now()
			s.log.Info("empty data directory: waiting for every initial member to answer before forming a new cluster",
				"waiting_for", strings.Join(missing, ","))
		}
		select {
		case <-s.ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// bootstrapServers is the configuration a node with no raft state starts
// with: the initial cluster, or this node alone.
func (s *Server) bootstrapServers() raft.Configuration {
	if len(s.cfg.InitialCluster) == 0 {
		return raft.Configuration{Servers: []raft.Server{
			{ID: raft.ServerID(s.cfg.NodeID), Address: s.trans.LocalAddr()},
		}}
	}
	var conf raft.Configuration
	for _, p := range s.cfg.InitialCluster {
		conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.Address)})
	}
	return conf
}

// noteExistingState says that the initial cluster is ignored on restart,
// and that a member waiting to be added back does not vote.
func (s *Server) noteExistingState() {
	if len(s.cfg.InitialCluster) > 0 {
		s.log.Info("raft state found in the data directory: rejoining with the stored membership, the initial cluster is ignored",
			"data_dir", s.cfg.DataDir)
	}
	if !s.ident.Votes() {
		s.log.Warn("this member's data directory started empty and it has not been added since: it does not vote. "+
			"If it is still in the configuration under its old data directory, "+peers.RecoverySteps(s.cfg.NodeID, string(s.trans.LocalAddr())),
			"node_id", s.cfg.NodeID)
	}
}

// Role is what GET /v1/role answers: this node's place in the cluster.
type Role struct {
	NodeID string `json:"nodeId"`
	// Role is "leader", "follower", "candidate" or "shutdown".
	Role string `json:"role"`
	// Ready is true on the leader once it serves acquisitions.
	Ready bool `json:"ready"`
	// LeaderID and LeaderAddress name the leader this node knows of (its
	// raft address); empty while there is none.
	LeaderID      string   `json:"leaderId"`
	LeaderAddress string   `json:"leaderAddress"`
	Term          uint64   `json:"term"`
	Members       []Member `json:"members"`
	// ClientURL is the URL this node advertises to clients; empty when
	// none (Config.AdvertiseClientURL).
	ClientURL string `json:"clientURL,omitempty"`
	// ClusterID is the cluster this member belongs to; empty while it
	// waits to be added, or for a data directory older than cluster IDs.
	ClusterID string `json:"clusterId"`
	// Votes is false while this member waits to be added (internal/peers/identity.go).
	Votes bool `json:"votes"`
}

// Member is one server of the raft configuration.
type Member struct {
	ID      string `json:"id"`
	Address string `json:"address"`
	// Suffrage is "voter" or "nonvoter".
	Suffrage string `json:"suffrage"`
	// ClientURL is the URL the member advertises to clients, as the log
	// last recorded it; empty when none is known.
	ClientURL string `json:"clientURL,omitempty"`
}

// Role returns this node's role and the cluster's membership.
func (s *Server) Role() Role {
	addr, id := s.raft.LeaderWithID()
	r := Role{
		NodeID: s.cfg.NodeID, Role: strings.ToLower(s.raft.State().String()), Ready: s.Ready(),
		LeaderID: string(id), LeaderAddress: string(addr), Term: s.raft.CurrentTerm(), Members: []Member{},
		ClusterID: s.ident.Get().Cluster, Votes: s.ident.Votes(),
		ClientURL: s.clientURL(),
	}
	if f := s.raft.GetConfiguration(); f.Error() == nil {
		urls := s.fsm.ClientURLs()
		for _, srv := range f.Configuration().Servers {
			m := Member{ID: string(srv.ID), Address: string(srv.Address), Suffrage: "voter", ClientURL: urls[string(srv.ID)]}
			if srv.Suffrage != raft.Voter {
				m.Suffrage = "nonvoter"
			}
			r.Members = append(r.Members, m)
		}
	}
	sort.Slice(r.Members, func(i, j int) bool { return r.Members[i].ID < r.Members[j].ID })
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
