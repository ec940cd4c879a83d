package fsm

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

// FSM adapts lease.State to raft. Apply is called by raft's single FSM
// goroutine, in log order; reads come from request goroutines under mu.
type FSM struct {
	mu      sync.RWMutex
	state   *lease.State
	maxIdle int
	// members maps a member's ID to the client URL it advertises
	// (members.go); written by log entries of their own.
	members map[string]string

	// onEvents sees the transitions of every applied batch, in log
	// order, after mu is released.
	onEvents func([]lease.Event)
	// onRestore sees the state after a snapshot replaced it, with mu held
	// for reading.
	onRestore func(*lease.State)

	// snapshots and restores count FSM snapshots started and restores
	// done since the process started (SnapshotStats).
	snapshots, restores atomic.Uint64
	// onProgress is called after every applied batch.
	onProgress func()
	// beforeApply, if set, is called before every batch (tests).
	beforeApply func()
	// lastIndex is the index of the last entry this process applied: a
	// command or a configuration, the entries raft hands to the state
	// machine (LastIndex).
	lastIndex atomic.Uint64
}

var (
	_ raft.FSM         = (*FSM)(nil)
	_ raft.BatchingFSM = (*FSM)(nil)
)

// Hooks are what the node is told of the state machine's work. A nil hook
// is not called.
type Hooks struct {
	// Events sees the transitions of every applied batch, in log order,
	// on raft's FSM goroutine after the state's lock is released: the
	// next batch waits for it.
	Events func([]lease.Event)
	// Restored sees the state after a snapshot replaced it, with the lock
	// held for reading: it must not call the FSM's writers.
	Restored func(*lease.State)
	// Progress is called after every applied batch.
	Progress func()
	// BeforeApply is called before every batch (tests).
	BeforeApply func()
}

// New returns the state machine of an empty lease.State that forgets idle
// keys beyond maxIdle (lease.New), telling h of its work.
func New(maxIdle int, h Hooks) *FSM {
	f := &FSM{state: lease.New(maxIdle), maxIdle: maxIdle, members: map[string]string{}, onEvents: func([]lease.Event) {}, onRestore: func(*lease.State) {}, onProgress: func() {}}
	if h.Events != nil {
		f.onEvents = h.Events
	}
	if h.Restored != nil {
		f.onRestore = h.Restored
	}
	if h.Progress != nil {
		f.onProgress = h.Progress
	}
	f.beforeApply = h.BeforeApply
	return f
}

// Apply applies one log entry and returns its lease.Result.
func (f *FSM) Apply(l *raft.Log) any {
	return f.ApplyBatch([]*raft.Log{l})[0]
}

// ApplyBatch applies consecutive entries under one lock. The result of a
// command is its lease.Result (an undecodable command's carries the error
// in Err); that of a member entry is an error, nil once applied; other
// entries' results are nil.
func (f *FSM) ApplyBatch(logs []*raft.Log) []any {
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
func (f *FSM) applyMember(l *raft.Log) error {
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

// Snapshot captures the state and the members' client URLs in O(1) under
// the read lock; Persist writes them out later, outside it.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	f.snapshots.Add(1)
	return fsmSnapshot{snap: f.state.Snapshot(), members: maps.Clone(f.members)}, nil
}

// Restore replaces the state with the snapshot rc holds: one Persist
// wrote, or a lease snapshot alone (an older fenced's, a backup), which
// restores with no client URLs.
func (f *FSM) Restore(rc io.ReadCloser) error {
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

// Read runs fn with the state locked for reading. fn must not keep the
// state, nor call the FSM's writers.
func (f *FSM) Read(fn func(*lease.State)) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	fn(f.state)
}

// Held returns the state's record of lease id of key if that lease is
// current, nil otherwise.
func (f *FSM) Held(key, id string) *lease.Held {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if h := f.state.Held(key); h != nil && h.ID == id {
		return h
	}
	return nil
}

// View returns a frozen view of the leases, taken in O(1) under the read
// lock; reading it needs no lock, so lists and snapshots for the dashboard
// never hold up the apply path however long they are. A view makes the
// next command copy the index nodes it changes (lease.State.View), so a
// count or a revision is read with Read instead.
func (f *FSM) View() lease.View {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.state.View()
}

// Revision is the revision a read of the state now reflects
// (ReadRevision): Watch from it neither misses nor repeats an event.
func (f *FSM) Revision() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return ReadRevision(f.state)
}

// ReadRevision is the revision a read of st reflects, for Get and List: the
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
func ReadRevision(st *lease.State) uint64 {
	return max(st.Applied(), 1)
}

// LastIndex is the index of the last entry this process applied: a
// command or a configuration, the entries raft hands to the state machine.
// Entries restored from a snapshot do not count.
func (f *FSM) LastIndex() uint64 { return f.lastIndex.Load() }

// SnapshotStats returns how many snapshots this FSM started and how many
// it restored.
func (f *FSM) SnapshotStats() (taken, restored uint64) {
	return f.snapshots.Load(), f.restores.Load()
}

// fsmSnapshot is a snapshot taken, to be persisted.
type fsmSnapshot struct {
	snap    *lease.Snapshot
	members map[string]string
}

// Persist writes the members' section, then the lease snapshot.
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
