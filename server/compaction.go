package server

import (
	"io"
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// compactedLogStore reads entries that log compaction removed as missing.
//
// raft-wal removes the head of its log by moving its first index; entries
// still in the segment being written stay readable. Raft then sends a new
// or lagging follower the log from index 1 instead of its snapshot, so a
// compacted log was not in effect compacted for replication, and a
// follower replayed every entry ever written into the active segment
// (64 MB of them) instead of one snapshot.
type compactedLogStore struct{ raft.LogStore }

func (s compactedLogStore) GetLog(index uint64, l *raft.Log) error {
	first, err := s.FirstIndex()
	if err != nil {
		return err
	}
	if index < first {
		return raft.ErrLogNotFound
	}
	return s.LogStore.GetLog(index, l)
}

// monotonicLogStore tells raft what the wrappers around the WAL hide: the
// WAL accepts only consecutive indexes (raft.MonotonicLogStore). Raft then
// empties the log when a follower installs a snapshot past its last entry;
// otherwise the follower's next append, at the snapshot's index + 1, is
// refused as out of order and the node stops.
//
// Raft (v1.7.2, hashicorp/raft#697) empties it as well when the installed
// snapshot is older than the log's last entry, yet keeps its last index
// and commit index, then applies from the snapshot's index + 1: the
// entries it needs are gone and the node panics with "log not found" on
// every start. DeleteRange therefore keeps the log from a snapshot that
// was just restored when the log holds the snapshot's last entry, as the
// Raft paper says a follower must. The snapshot's own entry stays too:
// raft's leader follows an install with an append whose previous entry is
// the snapshot's, and a follower without it refuses and is sent the
// snapshot again. A log that starts right after the snapshot is kept
// whole: it was appended after this snapshot was installed (or after the
// node's own snapshot or compaction covered its index), so it follows the
// snapshot's entry; a member added empty gets there when it is sent the
// same snapshot twice.
type monotonicLogStore struct {
	raft.LogStore
	restored *restoredSnapshot
	log      hclog.Logger
}

func (monotonicLogStore) IsMonotonic() bool { return true }

// StoreLog and StoreLogs end the install of a restored snapshot: a later
// deletion is a conflicting suffix, which must go.
func (s monotonicLogStore) StoreLog(l *raft.Log) error {
	s.restored.forget()
	return s.LogStore.StoreLog(l)
}

func (s monotonicLogStore) StoreLogs(logs []*raft.Log) error {
	s.restored.forget()
	return s.LogStore.StoreLogs(logs)
}

var _ raft.MonotonicLogStore = monotonicLogStore{}

func (s monotonicLogStore) DeleteRange(min, max uint64) error {
	if keep, ok := s.restored.take(min, max); ok {
		// Only raft's removeOldLogs gets here: compaction stops at a
		// snapshot just created, and a conflicting suffix starts after
		// the last entry committed, which a snapshot never passes.
		if min == keep.Index+1 {
			s.log.Warn("keeping the log that follows a restored snapshot (hashicorp/raft#697)",
				"snapshot-index", keep.Index, "kept-from", min, "kept-to", max)
			return nil
		}
		var at raft.Log
		if err := s.GetLog(keep.Index, &at); err == nil && at.Term == keep.Term {
			s.log.Warn("keeping the log from a restored snapshot older than it (hashicorp/raft#697)",
				"snapshot-index", keep.Index, "kept-from", keep.Index, "kept-to", max)
			if keep.Index <= min {
				return nil
			}
			max = keep.Index - 1
		}
	}
	return s.LogStore.DeleteRange(min, max)
}

// restoredSnapshot remembers the last snapshot raft opened, from when it is
// opened until the next snapshot is created, an entry is appended, or a
// deletion of the log head past it. A follower installing a snapshot
// creates it, opens it to restore the state machine, then deletes the log;
// a node that takes its own snapshot creates it, then compacts up to it,
// with nothing remembered.
type restoredSnapshot struct {
	mu    sync.Mutex
	armed bool
	meta  raft.SnapshotMeta
}

func (r *restoredSnapshot) set(meta *raft.SnapshotMeta) {
	r.mu.Lock()
	r.armed, r.meta = true, *meta
	r.mu.Unlock()
}

func (r *restoredSnapshot) forget() {
	r.mu.Lock()
	r.armed = false
	r.mu.Unlock()
}

// take returns the remembered snapshot's meta when deleting [min, max]
// would remove entries after its last index from a log that holds its
// entry or starts right after it, and forgets it.
func (r *restoredSnapshot) take(min, max uint64) (raft.SnapshotMeta, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.armed || max <= r.meta.Index || min > r.meta.Index+1 {
		return raft.SnapshotMeta{}, false
	}
	r.armed = false
	return r.meta, true
}

// restoreTrackingSnapshots tells monotonicLogStore which snapshot raft
// opened last, and when it created one since.
type restoreTrackingSnapshots struct {
	raft.SnapshotStore
	restored *restoredSnapshot
}

func (s restoreTrackingSnapshots) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration,
	configurationIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	s.restored.forget()
	return s.SnapshotStore.Create(version, index, term, configuration, configurationIndex, trans)
}

func (s restoreTrackingSnapshots) Open(id string) (*raft.SnapshotMeta, io.ReadCloser, error) {
	meta, rc, err := s.SnapshotStore.Open(id)
	if err == nil {
		s.restored.set(meta)
	}
	return meta, rc, err
}
