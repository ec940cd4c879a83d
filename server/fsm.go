package server

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"sync"
	"sync/atomic"

	"github.com/fencedio/fenced/lease"
	"github.com/hashicorp/raft"
)

// fsm adapts lease.State to raft. Apply is called by raft's single FSM
// goroutine, in log order; reads come from request goroutines under mu.
type fsm struct {
	mu      sync.RWMutex
	state   *lease.State
	maxIdle int
	// members maps a member's ID to the client URL it advertises
	// (clienturls.go); written by log entries of their own.
	members map[string]string

	// onEvents sees the transitions of every applied batch, in log
	// order, after mu is released.
	onEvents func([]lease.Event)
	// onRestore sees the state after a snapshot replaced it, with mu held
	// for reading.
	onRestore func(*lease.State)

	// snapshots and restores count FSM snapshots started and restores
	// done since the process started (Server.SnapshotStats).
	snapshots, restores atomic.Uint64
	// onProgress is called after every applied batch.
	onProgress func()
	// beforeApply, if set, is called before every batch (tests).
	beforeApply func()
	// lastIndex is the index of the last entry this process applied: a
	// command or a configuration, the entries raft hands to the state
	// machine (catchup.go).
	lastIndex atomic.Uint64
}

var (
	_ raft.FSM         = (*fsm)(nil)
	_ raft.BatchingFSM = (*fsm)(nil)
)

func newFSM(maxIdle int) *fsm {
	return &fsm{state: lease.New(maxIdle), maxIdle: maxIdle, members: map[string]string{}, onEvents: func([]lease.Event) {}, onRestore: func(*lease.State) {}, onProgress: func() {}}
}

// Apply applies one log entry and returns its lease.Result.
func (f *fsm) Apply(l *raft.Log) any {
	return f.ApplyBatch([]*raft.Log{l})[0]
}

// ApplyBatch applies consecutive entries under one lock.
func (f *fsm) ApplyBatch(logs []*raft.Log) []any {
	if f.beforeApply != nil {
		f.beforeApply()
	}
	results := make([]any, len(logs))
	events := make([]lease.Event, 0, len(logs))
	f.mu.Lock()
	for i, l := range logs {
		if l.Type != raft.LogCommand {
			continue
		}
		if len(l.Data) > 0 && l.Data[0] == memberEntryTag {
			results[i] = f.applyMember(l)
			continue
		}
		var c lease.Command
		if err := c.UnmarshalBinary(l.Data); err != nil {
			results[i] = lease.Result{Err: fmt.Errorf("log index %d: %w", l.Index, err)}
			continue
		}
		res := f.state.Apply(l.Index, l.Term, c)
		results[i] = res
		events = appendEvents(events, res)
		for _, item := range res.Items {
			events = appendEvents(events, item)
		}
	}
	f.mu.Unlock()
	if len(logs) > 0 {
		f.lastIndex.Store(logs[len(logs)-1].Index)
	}
	f.onProgress()
	f.onEvents(events)
	return results
}

// applyMember applies a member's client URL entry; the caller holds mu.
func (f *fsm) applyMember(l *raft.Log) error {
	id, url, err := decodeMemberEntry(l.Data)
	if err != nil {
		return fmt.Errorf("log index %d: %w", l.Index, err)
	}
	if url == "" {
		delete(f.members, id)
	} else {
		f.members[id] = url
	}
	return nil
}

func appendEvents(events []lease.Event, res lease.Result) []lease.Event {
	if res.Event.Type != 0 {
		events = append(events, res.Event)
	}
	if res.Next.Type != 0 {
		events = append(events, res.Next)
	}
	return events
}

func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	f.snapshots.Add(1)
	return fsmSnapshot{snap: f.state.Snapshot(), members: maps.Clone(f.members)}, nil
}

func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	br := bufio.NewReader(rc)
	members, err := readMembers(br)
	if err != nil {
		return err
	}
	s, err := lease.Restore(br, f.maxIdle)
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.state = s
	f.members = members
	f.mu.Unlock()
	f.restores.Add(1)
	f.mu.RLock()
	defer f.mu.RUnlock()
	f.onRestore(s)
	return nil
}

// read runs fn with the state locked for reading.
func (f *fsm) read(fn func(*lease.State)) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	fn(f.state)
}

// isCurrent reports whether lease id of key is current.
func (f *fsm) isCurrent(key, id string) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	_, err := f.state.Current(key, id)
	return err == nil
}

// view returns a frozen view of the leases, taken in O(1) under the read
// lock; reading it needs no lock, so lists and snapshots for the dashboard
// never hold up the apply path however long they are.
func (f *fsm) view() lease.View {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.state.View()
}

// revision is the revision a read of the state now reflects
// (readRevision): Watch from it neither misses nor repeats an event.
func (f *fsm) revision() uint64 { return max(f.view().Applied(), 1) }

// readRevision is the revision a read of st reflects, for Get and List: the
// log index of the last applied command. Every event of a command is
// produced by the same locked Apply that advances it, so the state read
// includes exactly the events up to it, and Watch from it (events after it)
// neither misses nor repeats one.
//
// A node that has applied no command yet reads as revision 1, not 0: Watch
// takes after_revision 0 to mean "no replay", which would drop events
// applied between the read and the subscription. 1 is safe because it is
// never a command's index (raft's first entry is the cluster
// configuration), so "after 1" is every event there is.
func readRevision(st *lease.State) uint64 {
	return max(st.Applied(), 1)
}

type fsmSnapshot struct {
	snap    *lease.Snapshot
	members map[string]string
}

func (s fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := writeMembers(sink, s.members); err != nil {
		sink.Cancel()
		return err
	}
	if _, err := s.snap.WriteTo(sink); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (fsmSnapshot) Release() {}
