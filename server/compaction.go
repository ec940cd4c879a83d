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
