package membership

import (
	"sort"
	"strings"

	"github.com/hashicorp/raft"
)

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
	// RolledBack names the peers this node refuses because they run on an
	// older copy of their data directory (internal/peers/acks.go), with why.
	RolledBack map[string]string `json:"rolledBack,omitempty"`
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

// RaftRole returns the part of node nodeID's Role that raft knows: its
// state, the leader, the term, and the members of the configuration with
// their client URLs from urls (by member ID). The node fills in the rest.
func RaftRole(r *raft.Raft, nodeID string, urls func() map[string]string) Role {
	addr, id := r.LeaderWithID()
	role := Role{
		NodeID: nodeID, Role: strings.ToLower(r.State().String()),
		LeaderID: string(id), LeaderAddress: string(addr), Term: r.CurrentTerm(), Members: []Member{},
	}
	if f := r.GetConfiguration(); f.Error() == nil {
		urls := urls()
		for _, srv := range f.Configuration().Servers {
			m := Member{ID: string(srv.ID), Address: string(srv.Address), Suffrage: "voter", ClientURL: urls[string(srv.ID)]}
			if srv.Suffrage != raft.Voter {
				m.Suffrage = "nonvoter"
			}
			role.Members = append(role.Members, m)
		}
	}
	sort.Slice(role.Members, func(i, j int) bool { return role.Members[i].ID < role.Members[j].ID })
	return role
}
