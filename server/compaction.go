package server

import "github.com/hashicorp/raft"

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
type monotonicLogStore struct{ raft.LogStore }

func (monotonicLogStore) IsMonotonic() bool { return true }

var _ raft.MonotonicLogStore = monotonicLogStore{}
