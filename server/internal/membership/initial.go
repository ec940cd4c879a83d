package membership

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"time"
)

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

// FormatPeers formats peers as ParseInitialCluster reads them.
func FormatPeers(peers []Peer) string {
	parts := make([]string, len(peers))
	for i, p := range peers {
		parts[i] = p.ID + "=" + p.Address
	}
	return strings.Join(parts, ",")
}

// Config holds the node's configuration values that membership reads
// (the node's Config fields of the same names).
type Config struct {
	NodeID string
	// InitialCluster lists the members a new cluster starts with.
	InitialCluster []Peer
	// Join: wait to be added instead of starting a cluster (--join);
	// Existing: InitialClusterState is "existing", which waits too.
	Join, Existing bool
	// RaftListen and RaftAdvertise are the address raft listens on and
	// the one peers dial, when not RaftListen.
	RaftListen, RaftAdvertise string
	// DataDir is named in what the node logs.
	DataDir string
	// MinTTL and HeartbeatTimeout are checked against each other in a
	// cluster (Validate).
	MinTTL, HeartbeatTimeout time.Duration
}

// Joining reports whether this node, on an empty data directory, waits to
// be added to a running cluster.
func (c Config) Joining() bool {
	return c.Join || c.Existing
}

// Validate checks InitialCluster against NodeID and RaftListen, and the
// timing rule of a cluster: MinTTL at least twice HeartbeatTimeout. An
// empty RaftListen has become this node's address in the list by then
// (the node's defaults).
func (c Config) Validate() error {
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
			c.NodeID, FormatPeers(c.InitialCluster)))
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

// AdvertisedRaftAddress is the address peers dial to reach this node:
// RaftAdvertise, its address in the initial cluster, or "" for the address
// it listens on.
func (c Config) AdvertisedRaftAddress() string {
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
