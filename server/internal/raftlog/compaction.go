package raftlog

import (
	"errors"
	"io"
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// Compacted reads entries that log compaction removed as missing.
//
// raft-wal removes the head of its log by moving its first index; entries
// still in the segment being written stay readable. Raft then sends a new
// or lagging follower the log from index 1 instead of its snapshot, so a
// compacted log was not in effect compacted for replication, and a
// follower replayed every entry ever written into the active segment
// (64 MB of them) instead of one snapshot.
type Compacted struct{ raft.LogStore }

func (s Compacted) GetLog(index uint64, l *raft.Log) error {
	first, err := s.FirstIndex()
	if err != nil {
		return err
	}
	if index < first {
		return raft.ErrLogNotFound
	}
	return s.LogStore.GetLog(index, l)
}

// Monotonic tells raft what the wrappers around the WAL hide: the
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
// was just installed when the log holds the snapshot's last entry, as the
// Raft paper says a follower must. The snapshot's own entry stays too:
// raft's leader follows an install with an append whose previous entry is
// the snapshot's, and a follower without it refuses and is sent the
// snapshot again. A log that starts right after the snapshot is kept
// whole: it was appended after this snapshot was installed (or after the
// node's own snapshot or compaction covered its index), so it follows the
// snapshot's entry; a member added empty gets there when it is sent the
// same snapshot twice.
//
// Only the deletion of the whole log right after an install is cut short.
// Raft's other deletions go through whole: compaction, and a conflicting
// suffix, which starts after the commit index and so after any snapshot;
// keeping that suffix made raft's next append out of order.
//
// A log kept whole that starts right after the snapshot lacks the entry
// raft's leader appends after; raft's follower takes that entry from the
// snapshot only when the snapshot is newer than the log's last entry, and
// otherwise looks it up in the log. GetLog therefore answers for the entry
// right before the log's first with a snapshot's index and term, which is
// what the Raft paper keeps of it. It is never applied: raft applies only
// past the last snapshot it restored.
//
// A log whose entry at the snapshot's index is of another term (or that
// starts past a gap after it) conflicts with the snapshot and goes whole,
// but raft still believes it holds the log's last index and looks up the
// entries up to there: it refused every append after the snapshot, which
// it was sent again, until the node restarted. Until raft appends again,
// GetLog therefore answers for an index from the snapshot's to that last
// one with a snapshot's index and term where there is one, and otherwise
// with an entry of term 0, which no leader's entry matches: raft's
// follower takes the entry of the leader's append that follows for a
// conflict, deletes up to its last index and appends the leader's
// entries. Such an entry is never applied either: raft commits past a
// snapshot only what an append matched or stored.
type Monotonic struct {
	raft.LogStore
	Restored *RestoredSnapshot
	Snaps    raft.SnapshotStore
	Log      hclog.Logger
}

func (Monotonic) IsMonotonic() bool { return true }

func (s Monotonic) GetLog(index uint64, l *raft.Log) error {
	err := s.LogStore.GetLog(index, l)
	if !errors.Is(err, raft.ErrLogNotFound) {
		return err
	}
	emptied := s.Restored.emptiedHolds(index)
	if !emptied {
		if first, ferr := s.LogStore.FirstIndex(); ferr != nil || first != index+1 {
			return err
		}
	}
	if s.Snaps != nil {
		snaps, lerr := s.Snaps.List()
		if lerr != nil {
			return err
		}
		for _, meta := range snaps {
			if meta.Index == index {
				*l = raft.Log{Index: meta.Index, Term: meta.Term, Type: raft.LogNoop}
				return nil
			}
		}
	}
	if emptied {
		*l = raft.Log{Index: index, Term: 0, Type: raft.LogNoop}
		return nil
	}
	return err
}

// StoreLog and StoreLogs end the install of a restored snapshot; once
// they succeed raft's last index is the last entry stored.
func (s Monotonic) StoreLog(l *raft.Log) error {
	s.Restored.forget()
	if err := s.LogStore.StoreLog(l); err != nil {
		return err
	}
	s.Restored.appended()
	return nil
}

func (s Monotonic) StoreLogs(logs []*raft.Log) error {
	s.Restored.forget()
	if err := s.LogStore.StoreLogs(logs); err != nil {
		return err
	}
	s.Restored.appended()
	return nil
}

var _ raft.MonotonicLogStore = Monotonic{}

func (s Monotonic) DeleteRange(min, max uint64) error {
	keep, ok := s.Restored.take()
	if !ok || max <= keep.Index {
		return s.LogStore.DeleteRange(min, max)
	}
	first, err := s.LogStore.FirstIndex()
	if err != nil {
		return err
	}
	last, err := s.LogStore.LastIndex()
	if err != nil {
		return err
	}
	// After an install raft's removeOldLogs deletes the whole log. A
	// conflicting suffix starts past the snapshot, so past the first
	// entry of a log that holds the snapshot's; compaction ends before
	// the last entry.
	if min > first || max < last {
		return s.LogStore.DeleteRange(min, max)
	}
	if first == keep.Index+1 {
		s.Log.Warn("keeping the log that follows a restored snapshot (hashicorp/raft#697)",
			"snapshot-index", keep.Index, "kept-from", first, "kept-to", max)
		return nil
	}
	var at raft.Log
	if first <= keep.Index {
		if err := s.GetLog(keep.Index, &at); err == nil && at.Term == keep.Term {
			s.Log.Warn("keeping the log from a restored snapshot older than it (hashicorp/raft#697)",
				"snapshot-index", keep.Index, "kept-from", keep.Index, "kept-to", max)
			return s.LogStore.DeleteRange(min, keep.Index-1)
		}
	}
	if err := s.LogStore.DeleteRange(min, max); err != nil {
		return err
	}
	// Raft still believes the log reaches max.
	s.Restored.emptiedTo(keep.Index, max)
	s.Log.Warn("deleted the log that conflicts with a restored snapshot, answering for it until the next append (hashicorp/raft#697)",
		"snapshot-index", keep.Index, "snapshot-term", keep.Term, "deleted-from", min, "deleted-to", max)
	return nil
}

// RestoredSnapshot remembers a snapshot that this process created and then
// opened for the first time, until the next deletion from the log, append,
// or snapshot created. A follower installing a snapshot creates it, opens
// it to restore the state machine, then deletes the log. A node that takes
// its own snapshot creates it, then compacts up to it, with nothing
// remembered; it may open it later to send it, and a deletion after that
// is a conflicting suffix, which goes through as its log holds the
// snapshot's entry. A snapshot restored at start, or installed and then
// sent, is not opened for the first time: nothing is remembered, though
// the log may start right after it and conflict from there.
type RestoredSnapshot struct {
	mu sync.Mutex
	// created holds the last two snapshots created and not opened since:
	// a node may take its own while it copies one sent by the leader.
	created [2]string
	armed   bool
	meta    raft.SnapshotMeta
	// emptied is, from an install that deleted a log conflicting with
	// its snapshot until the next append, the snapshot's index and the
	// log's last index, which raft keeps as its own (Monotonic.GetLog).
	emptied struct{ from, to uint64 }
}

func (r *RestoredSnapshot) emptiedTo(from, to uint64) {
	r.mu.Lock()
	r.emptied.from, r.emptied.to = from, to
	r.mu.Unlock()
}

func (r *RestoredSnapshot) emptiedHolds(index uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.emptied.to != 0 && r.emptied.from <= index && index <= r.emptied.to
}

// appended tells that raft's last index is now that of the log.
func (r *RestoredSnapshot) appended() {
	r.mu.Lock()
	r.emptied.from, r.emptied.to = 0, 0
	r.mu.Unlock()
}

func (r *RestoredSnapshot) create(id string) {
	r.mu.Lock()
	r.armed, r.created = false, [2]string{r.created[1], id}
	r.mu.Unlock()
}

func (r *RestoredSnapshot) open(meta *raft.SnapshotMeta) {
	r.mu.Lock()
	for i, id := range r.created {
		if id != "" && id == meta.ID {
			r.armed, r.meta, r.created[i] = true, *meta, ""
		}
	}
	r.mu.Unlock()
}

func (r *RestoredSnapshot) forget() {
	r.mu.Lock()
	r.armed = false
	r.mu.Unlock()
}

// take returns the remembered snapshot's meta, and forgets it.
func (r *RestoredSnapshot) take() (raft.SnapshotMeta, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	armed := r.armed
	r.armed = false
	return r.meta, armed
}

// TrackRestores tells Monotonic which snapshots raft
// created and opened.
type TrackRestores struct {
	raft.SnapshotStore
	Restored *RestoredSnapshot
}

func (s TrackRestores) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration,
	configurationIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	sink, err := s.SnapshotStore.Create(version, index, term, configuration, configurationIndex, trans)
	if err != nil {
		s.Restored.forget()
		return nil, err
	}
	s.Restored.create(sink.ID())
	return sink, nil
}

func (s TrackRestores) Open(id string) (*raft.SnapshotMeta, io.ReadCloser, error) {
	meta, rc, err := s.SnapshotStore.Open(id)
	if err == nil {
		s.Restored.open(meta)
	}
	return meta, rc, err
}
