package server

import (
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/fencedio/fenced/lease"
	"github.com/fencedio/fenced/server/internal/restore"
)

// Backup and restore
//
// GET /v1/backup answers a backup of the node's applied state (see the
// lease package: every key with its last token, no lease and no lease ID),
// consistent at the log index in the Fenced-Backup-Index header. Ask the
// leader for the latest state (fencectl snapshot save does); a follower's
// is a little older, which the restore margin covers like anything else
// written after the backup.
//
// RestoreBackup makes the data directory of one member of a new cluster
// from a backup: a raft snapshot at index max(A+Bump, StartFloor) (A the
// backup's index) holding the backed-up keys and the new membership
// (internal/restore, which also says what StartFloor covers). Every member
// is restored from the same file with the same Bump, StartFloor and
// InitialCluster and then started as usual; they elect a leader, and its
// first entry, and every token, is above that index.

// BackupIndexHeader names the log index a backup was taken at.
const BackupIndexHeader = "Fenced-Backup-Index"

// WriteBackup writes a backup of this node's applied state to w and returns
// the index it was taken at.
func (s *Server) WriteBackup(w io.Writer) (uint64, error) {
	snap := s.backup()
	_, err := snap.WriteTo(w)
	return snap.Applied(), err
}

func (s *Server) backup() *lease.Snapshot {
	var snap *lease.Snapshot
	s.fsm.Read(func(st *lease.State) { snap = st.Snapshot() })
	return snap.Backup()
}

func (s *Server) serveBackup(w http.ResponseWriter, _ *http.Request) {
	snap := s.backup()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set(BackupIndexHeader, strconv.FormatUint(snap.Applied(), 10))
	if _, err := snap.WriteTo(w); err != nil {
		s.log.Warn("backup not sent", "err", err)
	}
}

// RestoreConfig configures RestoreBackup. Zero fields mean their defaults.
type RestoreConfig struct {
	// DataDir is the new member's data directory; it must hold no raft
	// state. Default "./fenced-data".
	DataDir string
	// NodeID is this member's ID. Default "node1".
	NodeID string
	// InitialCluster is the new cluster's membership, the same for every
	// member. Empty: a cluster of one, NodeID at RaftAddress.
	InitialCluster []Peer
	// RaftAddress is the address of a cluster of one (the node's
	// --raft-advertise, or --raft-listen). Default "127.0.0.1:7421".
	RaftAddress string
	// Bump is added to the backup's index to give the new cluster's first
	// index: it must exceed the number of entries the old cluster wrote
	// after the backup (see the lease package). Default
	// lease.DefaultRestoreBump.
	Bump uint64
	// StartFloor is a lower bound of the new cluster's first index, beside
	// the backup's index plus Bump, in microseconds since 1970. Zero means
	// now, which only a cluster of one can use: members of one cluster
	// must start at the same index, so a restore of several members needs
	// the same StartFloor for each (ErrRestoreStartFloor).
	StartFloor uint64
	// MaxIdleKeys is the nodes' Config.MaxIdleKeys. Default 100,000.
	MaxIdleKeys int
}

// ErrRestoreStartFloor is returned for a restore of a member of several
// without a StartFloor.
var ErrRestoreStartFloor = restore.ErrStartFloor

// withDefaults returns c with its zero fields set to their defaults.
func (c RestoreConfig) withDefaults() RestoreConfig {
	setDefault(&c.DataDir, DefaultDataDir)
	setDefault(&c.NodeID, DefaultNodeID)
	setDefault(&c.RaftAddress, DefaultRaftListen)
	setDefault(&c.Bump, lease.DefaultRestoreBump)
	setDefault(&c.MaxIdleKeys, lease.DefaultMaxIdleKeys)
	return c
}

// Validate checks the configuration as RestoreBackup would use it, zero
// fields replaced by their defaults. It does not change c.
func (c RestoreConfig) Validate() error {
	c = c.withDefaults()
	if len(c.InitialCluster) == 0 {
		return nil
	}
	if err := c.plan().Validate(); err != nil {
		return err
	}
	// The members' own rules: IDs and addresses as a node checks them.
	probe := Config{NodeID: c.NodeID, InitialCluster: c.InitialCluster, MinTTL: time.Hour}.WithDefaults()
	return probe.validateCluster()
}

// RestoreBackup writes the data directory of a new member from backup and
// returns the new cluster's starting index: every token it issues is
// above it.
func RestoreBackup(cfg RestoreConfig, backup io.Reader) (uint64, error) {
	if err := cfg.Validate(); err != nil {
		return 0, err
	}
	return restore.Write(cfg.withDefaults().plan(), backup)
}

// plan is c as the restore package takes it.
func (c RestoreConfig) plan() restore.Plan {
	p := restore.Plan{DataDir: c.DataDir, NodeID: c.NodeID, RaftAddress: c.RaftAddress,
		Bump: c.Bump, StartFloor: c.StartFloor, MaxIdleKeys: c.MaxIdleKeys}
	for _, m := range c.InitialCluster {
		p.InitialCluster = append(p.InitialCluster, restore.Member{ID: m.ID, Address: m.Address})
	}
	return p
}
