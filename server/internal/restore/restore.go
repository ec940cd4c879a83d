package restore

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"time"

	"github.com/fencedio/fenced/internal/failpoint"
	"github.com/fencedio/fenced/lease"
	"github.com/fencedio/fenced/server/internal/peers"
	"github.com/fencedio/fenced/server/internal/raftlog"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// Member is a member of the new cluster: its raft server ID and address.
type Member struct {
	ID      string
	Address string
}

// Plan is a restore of one member with every default filled in: the
// node's RestoreConfig, resolved.
type Plan struct {
	// DataDir is the new member's data directory; it must hold no raft
	// state.
	DataDir string
	// NodeID is this member's ID, and RaftAddress the address of a cluster
	// of one.
	NodeID, RaftAddress string
	// InitialCluster is the new cluster's membership, the same for every
	// member. Empty: a cluster of one, NodeID at RaftAddress.
	InitialCluster []Member
	// Bump is added to the backup's index to give the new cluster's first
	// index: it must exceed the number of entries the old cluster wrote
	// after the backup.
	Bump uint64
	// StartFloor is a lower bound of the new cluster's first index, beside
	// the backup's index plus Bump, in microseconds since 1970. Zero means
	// now, which only a cluster of one can use (ErrStartFloor).
	StartFloor uint64
	// MaxIdleKeys is the nodes' Config.MaxIdleKeys.
	MaxIdleKeys int
}

// ErrStartFloor is returned for a restore of a member of several without a
// StartFloor.
var ErrStartFloor = errors.New("a member of a cluster of several needs a start floor, the same for every member")

// ErrTarget is returned by Write for a data directory that already holds
// raft state: a restore starts a new cluster, it never overwrites one.
var ErrTarget = errors.New("the data directory already holds raft state")

// Validate checks what p needs beyond the node's own rules for a
// membership: members of several must be told one start floor, as each
// picking its own clock would start them at different indexes.
func (p Plan) Validate() error {
	if len(p.InitialCluster) > 1 && p.StartFloor == 0 {
		return ErrStartFloor
	}
	return nil
}

// Write writes the data directory of a new member from backup and returns
// the new cluster's starting index: every token it issues is above it.
func Write(p Plan, backup io.Reader) (uint64, error) {
	if err := p.Validate(); err != nil {
		return 0, err
	}
	digest := sha256.New()
	st, err := lease.Restore(io.TeeReader(backup, digest), p.MaxIdleKeys)
	if err != nil {
		return 0, err
	}
	if _, err := io.Copy(digest, backup); err != nil {
		return 0, fmt.Errorf("read backup: %w", err)
	}
	if st.Applied() > math.MaxUint64-p.Bump {
		return 0, fmt.Errorf("restore: index %d plus bump %d overflows", st.Applied(), p.Bump)
	}
	floor := p.StartFloor
	if floor == 0 {
		floor = uint64(time.Now().UnixMicro())
	}
	at := max(st.Applied()+p.Bump, floor)
	if err := st.Rebase(at); err != nil {
		return 0, err
	}
	if err := os.MkdirAll(p.DataDir, 0o700); err != nil {
		return 0, fmt.Errorf("data dir: %w", err)
	}
	hlog := hclog.NewNullLogger()
	store, err := raftlog.Open(p.DataDir, hlog)
	if err != nil {
		return 0, err
	}
	defer store.Close()
	snaps, err := raft.NewFileSnapshotStoreWithLogger(p.DataDir, 2, hlog)
	if err != nil {
		return 0, fmt.Errorf("open snapshots: %w", err)
	}
	existing, err := raft.HasExistingState(store, store, snaps)
	if err != nil {
		return 0, fmt.Errorf("read raft state: %w", err)
	}
	if existing {
		return 0, fmt.Errorf("restore into %s: %w", p.DataDir, ErrTarget)
	}
	conf := raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: raft.ServerID(p.NodeID), Address: raft.ServerAddress(p.RaftAddress)}}}
	if len(p.InitialCluster) > 0 {
		conf.Servers = nil
		for _, m := range p.InitialCluster {
			conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(m.ID), Address: raft.ServerAddress(m.Address)})
		}
	}
	// The first term is the first index: above any term the old cluster
	// could have reached (one per election, a restored one starting at its
	// own, earlier, floor), so that none of its members, at its highest
	// term, can outvote the restored members.
	term := at
	mutant := failpoint.Enabled(failpoint.RestoreIgnoresBumpAndFloor)
	if mutant {
		term = 1 // the mutant: the old cluster's terms outvote this one's
	}
	// The snapshot's legacy peer list is encoded by a transport; raft's
	// network transport and this one encode an address as its bytes.
	_, enc := raft.NewInmemTransport(raft.ServerAddress(p.RaftAddress))
	defer enc.Close()
	sink, err := snaps.Create(raft.SnapshotVersionMax, at, term, conf, at, enc)
	if err != nil {
		return 0, fmt.Errorf("create snapshot: %w", err)
	}
	if _, err := st.Snapshot().WriteTo(sink); err != nil {
		sink.Cancel()
		return 0, fmt.Errorf("write snapshot: %w", err)
	}
	if err := sink.Close(); err != nil {
		return 0, fmt.Errorf("write snapshot: %w", err)
	}
	if err := store.SetUint64([]byte("CurrentTerm"), term); err != nil {
		return 0, fmt.Errorf("write term: %w", err)
	}
	ident, err := peers.OpenIdentity(p.DataDir, store, true)
	if err != nil {
		return 0, err
	}
	id := ident.Get()
	id.Backup = hex.EncodeToString(digest.Sum(nil))
	id.Cluster, id.Votes, id.Initial = ClusterID(id.Backup, at, conf), true, nil
	if mutant {
		id.Cluster = "" // the mutant: no hello refuses a member without one
	}
	if err := ident.Save(id); err != nil {
		return 0, err
	}
	return at, nil
}

// ClusterID is the cluster ID of the members restored from the backup
// whose SHA-256 is digest, starting at index at, with configuration conf:
// the same for every member of one restore, another for a restore of
// another backup, at another floor or of other members. Members of the
// old cluster, and of another restore, are refused on the peer port.
func ClusterID(digest string, at uint64, conf raft.Configuration) string {
	members := make(map[string]string, len(conf.Servers))
	for _, srv := range conf.Servers {
		members[string(srv.ID)] = string(srv.Address)
	}
	members["restore"] = fmt.Sprintf("%s@%d", digest, at)
	return peers.FormationID(members)
}
