package peers

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/fencedio/fenced/internal/failpoint"
)

// Rollback detection
//
// A member started on an older copy of its own data directory (a VM
// snapshot, a file-level backup put back) has the same instance, cluster ID
// and log ID as before, and a log that ends before entries it acknowledged:
// counted in a quorum once, those entries may now be missing from a
// quorum. So every member records, per peer and per peer directory
// (instance), the last log position the peer acknowledged to it (Acks,
// noted by the leader's transport on every successful append), keeps it in
// its raft log's stable store, and checks the answer of every peer it
// dials against it: a peer whose log ends before what it acknowledged is
// refused as rolled back (ErrRolledBack), on raft's connections and
// forwarded calls alike, and named in the log and in /v1/role.
//
// Only what the peer acknowledged before this member's hello went out
// counts (Checker): the peer says where its log ends once it has read that
// hello, after every such acknowledgement, whereas an entry it
// acknowledges on another connection meanwhile may come after it looked.
// The member that accepts a connection cannot order the dialer's hello
// against its own acknowledgements, so it does not check it; the leader
// dials its followers, and refuses a rolled-back one when it does.
//
// Not guaranteed: a member knows only what was acknowledged to it, so a
// rolled-back member is caught by the members it acknowledged entries to
// (the leaders since), not by the others; a rollback of the whole cluster,
// or of a member together with every member that saw its acknowledgements,
// cannot be detected. The record is written to disk at most every
// AcksFlushInterval: a rollback to a copy newer than the last write goes
// unnoticed.

// ErrRolledBack means a peer's log ends before an entry it acknowledged:
// it runs on an older copy of its data directory.
var ErrRolledBack = errors.New("peer runs on a rolled-back data directory")

// AcksFlushInterval is how often the acknowledgements noted are written to
// disk, if any changed.
const AcksFlushInterval = 100 * time.Millisecond

// acksKey is the stable-store key of the acknowledgements (JSON).
var acksKey = []byte("FencedPeerAcks")

// Position is a log position: the term and index of an entry.
type Position struct {
	Term  uint64 `json:"term"`
	Index uint64 `json:"index"`
}

// Before orders positions as raft compares logs: a log that ends at p is
// behind one that ends at q.
func (p Position) Before(q Position) bool {
	return p.Term < q.Term || (p.Term == q.Term && p.Index < q.Index)
}

// RolledBackError names the rolled-back peer and what it forgot.
type RolledBackError struct {
	Peer         string // node ID and address
	Instance     string
	Acknowledged Position // the last position it acknowledged
	Has          Position // where its log ends now
}

func (e *RolledBackError) Error() string {
	return fmt.Sprintf("%v: %s acknowledged the log up to index %d (term %d), but its log now ends at index %d (term %d): "+
		"it runs on an older copy of its data directory and forgot entries it acknowledged. Do not use copies of a data "+
		"directory; to bring it back: %s", ErrRolledBack, e.Peer, e.Acknowledged.Index, e.Acknowledged.Term,
		e.Has.Index, e.Has.Term, RecoverySteps("ID", ""))
}

func (e *RolledBackError) Is(target error) bool { return target == ErrRolledBack }

type ack struct {
	Instance string   `json:"instance"`
	Acked    Position `json:"acked"`
}

// Acks is what each peer acknowledged to this member. Safe for concurrent
// use.
type Acks struct {
	store LogBinding

	mu      sync.Mutex
	peers   map[string]ack // by node ID
	dirty   bool
	refused map[string]string // node ID: why its last hello was refused

	stop chan struct{}
	done chan struct{}
}

// OpenAcks reads the acknowledgements kept in store.
func OpenAcks(store LogBinding) (*Acks, error) {
	a := &Acks{store: store, peers: map[string]ack{}, refused: map[string]string{}}
	b, err := store.Get(acksKey)
	if err != nil && !absent(err) {
		return nil, fmt.Errorf("read peers' acknowledgements: %w", err)
	}
	if len(b) > 0 {
		if err := json.Unmarshal(b, &a.peers); err != nil {
			return nil, fmt.Errorf("read peers' acknowledgements: %w", err)
		}
	}
	return a, nil
}

// Note records that node acknowledged the log up to at.
func (a *Acks) Note(node string, at Position) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if p, ok := a.peers[node]; ok && p.Instance != "" && p.Acked.Before(at) {
		p.Acked = at
		a.peers[node] = p
		a.dirty = true
	}
}

// Checker returns the check of the answer to a hello sent after this call.
// The check refuses a peer whose log ends before what it acknowledged
// until then, and otherwise notes its instance: acknowledgements count for
// that data directory from now on (a peer on a new directory starts
// afresh).
func (a *Acks) Checker() func(h Hello, addr string) error {
	a.mu.Lock()
	before := maps.Clone(a.peers)
	a.mu.Unlock()
	return func(h Hello, addr string) error { return a.check(h, addr, before[h.Node]) }
}

func (a *Acks) check(h Hello, addr string, before ack) error {
	if h.Node == "" || h.Instance == "" {
		return nil
	}
	has := Position{h.LastTerm, h.LastIndex}
	a.mu.Lock()
	defer a.mu.Unlock()
	if before.Instance == h.Instance && has != (Position{}) && has.Before(before.Acked) && !failpoint.Enabled(failpoint.AcksIgnored) {
		err := &RolledBackError{Peer: h.Node + " (" + addr + ")", Instance: h.Instance, Acknowledged: before.Acked, Has: has}
		a.refused[h.Node] = err.Error()
		return err
	}
	delete(a.refused, h.Node)
	if p, ok := a.peers[h.Node]; !ok || p.Instance != h.Instance {
		a.peers[h.Node] = ack{Instance: h.Instance}
		a.dirty = true
	}
	return nil
}

// Refused returns the peers whose last hello was refused as rolled back,
// with the reason.
func (a *Acks) Refused() map[string]string {
	if a == nil {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.refused) == 0 {
		return nil
	}
	out := make(map[string]string, len(a.refused))
	for k, v := range a.refused {
		out[k] = v
	}
	return out
}

// Flush writes the acknowledgements to the store if they changed.
func (a *Acks) Flush() error {
	a.mu.Lock()
	if !a.dirty {
		a.mu.Unlock()
		return nil
	}
	b, err := json.Marshal(a.peers)
	a.dirty = false
	a.mu.Unlock()
	if err == nil {
		err = a.store.Set(acksKey, b)
	}
	if err != nil {
		a.mu.Lock()
		a.dirty = true
		a.mu.Unlock()
		return fmt.Errorf("write peers' acknowledgements: %w", err)
	}
	return nil
}

// Start writes the acknowledgements every AcksFlushInterval until Close;
// onErr is told of a failed write.
func (a *Acks) Start(onErr func(error)) {
	a.stop, a.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(a.done)
		t := time.NewTicker(AcksFlushInterval)
		defer t.Stop()
		for {
			select {
			case <-a.stop:
				return
			case <-t.C:
				if err := a.Flush(); err != nil {
					onErr(err)
				}
			}
		}
	}()
}

// Close stops the writes Start began and writes what is left.
func (a *Acks) Close() error {
	if a.stop != nil {
		close(a.stop)
		<-a.done
		a.stop = nil
	}
	return a.Flush()
}
