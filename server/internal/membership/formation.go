package membership

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/fencedio/fenced/internal/failpoint"
	"github.com/fencedio/fenced/server/internal/peers"
	"github.com/hashicorp/raft"
)

// Formation forms or joins a cluster for a node whose data directory
// holds no raft state, and notes what a node restarted on its data
// directory does with it.
type Formation struct {
	Config Config
	Ident  *peers.IdentityStore // the member's identity in its data directory
	Raft   *raft.Raft
	// Local is this node's raft address, as its transport has it.
	Local raft.ServerAddress
	// Status asks the node at a raft address who it is (peers.Mux.Status).
	Status func(ctx context.Context, address string) (peers.Hello, error)
	Log    *slog.Logger
}

// Bootstrap starts a new cluster from the initial cluster, or a cluster of
// one; a node told to join waits instead to be added by a leader. It
// returns form true when the new cluster must wait for every other initial
// member to answer: the caller runs Form then, in a goroutine of its own.
func (f *Formation) Bootstrap() (form bool, err error) {
	me := f.Ident.Get()
	switch {
	case failpoint.Enabled(failpoint.SilentRebootstrap) && !f.Config.Joining():
		me.Votes = true
		if err := f.Ident.Save(me); err != nil {
			return false, err
		}
		return false, f.bootstrapRaft()
	case f.Config.Joining():
		f.Log.Info("no raft state: waiting to be added to a cluster (fencectl member add); this member does not vote until then",
			"node_id", f.Config.NodeID, "raft_address", string(f.Local))
		return false, nil
	case len(f.Config.InitialCluster) <= 1:
		initial := map[string]string{f.Config.NodeID: me.Instance}
		if err := f.Ident.Join(peers.FormationID(initial), initial); err != nil {
			return false, err
		}
		return false, f.bootstrapRaft()
	}
	return true, nil
}

func (f *Formation) bootstrapRaft() error {
	err := f.Raft.BootstrapCluster(f.bootstrapServers()).Error()
	if err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
		return fmt.Errorf("bootstrap: %w", err)
	}
	return nil
}

// formRetry is how often a forming member asks the peers that have not
// answered yet.
const formRetry = 250 * time.Millisecond

// Form asks every other initial member for its state until each has
// answered, then bootstraps the new cluster; or joins the cluster a peer
// already formed with this member's instance among the initial ones; or
// refuses, when a peer belongs to a cluster that counts this member with
// another data directory. It returns nil when ctx ends first.
func (f *Formation) Form(ctx context.Context) error {
	me := f.Ident.Get()
	seen := map[string]string{f.Config.NodeID: me.Instance}
	var lastNote time.Time
	tick := time.NewTicker(formRetry)
	defer tick.Stop()
	for {
		if f.Ident.Votes() {
			return nil // added by a leader meanwhile
		}
		var missing []string
		for _, p := range f.Config.InitialCluster {
			if _, ok := seen[p.ID]; ok {
				continue
			}
			sctx, cancel := context.WithTimeout(ctx, peers.HandshakeTimeout)
			st, err := f.Status(sctx, p.Address)
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
				if st.Initial[f.Config.NodeID] != me.Instance {
					return &peers.MemberBootstrappedError{Node: f.Config.NodeID, Address: string(f.Local), Peer: p.ID + " (" + p.Address + ")"}
				}
				if err := f.Ident.Join(st.Cluster, st.Initial); err != nil {
					return err
				}
				return f.bootstrapRaft()
			}
			seen[p.ID] = st.Instance
		}
		if len(missing) == 0 {
			if err := f.Ident.Join(peers.FormationID(seen), seen); err != nil {
				return err
			}
			f.Log.Info("every initial member answered: bootstrapping a new cluster", "cluster_id", f.Ident.Get().Cluster)
			return f.bootstrapRaft()
		}
		if time.Since(lastNote) > 10*time.Second {
			lastNote = time.Now()
			f.Log.Info("empty data directory: waiting for every initial member to answer before forming a new cluster",
				"waiting_for", strings.Join(missing, ","))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// bootstrapServers is the configuration a node with no raft state starts
// with: the initial cluster, or this node alone.
func (f *Formation) bootstrapServers() raft.Configuration {
	if len(f.Config.InitialCluster) == 0 {
		return raft.Configuration{Servers: []raft.Server{
			{ID: raft.ServerID(f.Config.NodeID), Address: f.Local},
		}}
	}
	var conf raft.Configuration
	for _, p := range f.Config.InitialCluster {
		conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.Address)})
	}
	return conf
}

// NoteExistingState says that the initial cluster is ignored on restart,
// and that a member waiting to be added back does not vote.
func (f *Formation) NoteExistingState() {
	if len(f.Config.InitialCluster) > 0 {
		f.Log.Info("raft state found in the data directory: rejoining with the stored membership, the initial cluster is ignored",
			"data_dir", f.Config.DataDir)
	}
	if !f.Ident.Votes() {
		f.Log.Warn("this member's data directory started empty and it has not been added since: it does not vote. "+
			"If it is still in the configuration under its old data directory, "+peers.RecoverySteps(f.Config.NodeID, string(f.Local)),
			"node_id", f.Config.NodeID)
	}
}
