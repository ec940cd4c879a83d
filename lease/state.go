package lease

import (
	"strings"
	"sync/atomic"

	"github.com/fencedio/fenced/internal/failpoint"
)

// EventType says what a transition did to a lease.
type EventType uint8

const (
	Acquired EventType = 1
	Released EventType = 2
	Expired  EventType = 3
)

func (t EventType) String() string {
	switch t {
	case Acquired:
		return "acquired"
	case Released:
		return "released"
	case Expired:
		return "expired"
	}
	return "unknown"
}

// Event is a transition made by one applied command.
type Event struct {
	Type     EventType
	Lease    Lease
	Revision uint64 // log index of the command
	// By is the principal that revoked the lease (OpRevoke); empty when its
	// holder released it or it expired. A revocation is a Released event.
	By string

	held *Held // the state's record of the lease
}

// Held returns the state's record of the event's lease: the one granted
// for Acquired, the one ended for Released and Expired. Whoever tracks
// every current lease (the leader's deadlines) keeps it instead of a
// copy of Lease.
func (e Event) Held() *Held { return e.held }

// Held is the state's record of a current lease. Its Lease is written
// before the record is stored and never changed after: the record is
// shared, as it is, by the state, its views and snapshots and the events
// that granted and ended it.
//
// The other fields are room for what a node keeps of each current lease
// beside the state machine, so that a million leases need no map of their
// own there: the state machine never reads or writes them, snapshots
// leave them out, and a restored state's records start with them zero.
// Each has one owner, which guards it with a lock of its own. Readers of
// the lease copy Lease, never the whole record.
type Held struct {
	Lease
	// Deadline is when the lease is due, in nanoseconds on the node's
	// monotonic clock, and Slot its place among the deadlines plus one
	// (0: not tracked). Package expiry's, under its Expirer's lock.
	Deadline int64
	Slot     int
	// Client is the address of the caller this node granted the lease
	// to, while the lease counts against it; empty when it counts against
	// none. Package admission's, under its Leases' lock.
	Client string
}

// Result is the outcome of applying one command.
type Result struct {
	// Event is the transition the command made; Event.Type is 0 when the
	// command changed nothing (then Err says why).
	Event Event
	// Next is the grant of a handover (Command.NextID), made in the same
	// entry right after Event; Next.Type is 0 when there was none.
	Next Event
	// Err is a *HeldError for an acquisition of a held key, ErrNotHeld for a
	// release or expiry of a lease that is not current, ErrWrongTerm for an
	// expiry batch written in another term than the one that decided it.
	Err error
	// Items are the results of an OpExpireBatch, one per Command.Expiries,
	// in order; Event and Next of the batch itself are empty.
	Items []Result
}

// DefaultMaxIdleKeys bounds how many freed keys keep their last token.
const DefaultMaxIdleKeys = 100_000

// State is the lease state machine. It is not safe for concurrent use: the
// caller serializes Apply and guards reads against it.
type State struct {
	// index holds the current leases ordered by key; it is the only map of
	// them, so that a lease costs one entry. It is persistent: every change
	// makes a new version and leaves older versions intact, so a View
	// taken under the caller's lock stays valid, unchanged, after the lock
	// is released, and List costs O(log n + answer) instead of a copy and
	// sort of every lease. The records it holds are shared with views,
	// snapshots and events (Held). index.go says how.
	index index
	// gen is the generation of the state's changes to index: the nodes
	// made in it are the state's alone, changed in place, until a view
	// shares them (shared), and the next change starts a new one.
	gen    uint64
	shared atomic.Bool // set under the caller's read lock by View
	// owners counts current leases per owner, for quotas, and holds the
	// one copy of each owner's name that its leases share.
	owners  map[string]owned
	idle    map[string]uint64 // last token of recently freed keys
	queue   []idleKey         // idle keys in the order they were freed
	head    int               // queue[:head] are evicted
	maxIdle int
	applied uint64
	bytes   int64 // Cost of the current leases
}

// owned is an owner's entry in State.owners.
type owned struct {
	name  string // shared by the owner's leases
	count int
}

type idleKey struct {
	key   string
	token uint64
}

// New returns an empty state machine that remembers the last token of at most
// maxIdle freed keys (DefaultMaxIdleKeys when maxIdle <= 0). Every node of a
// cluster must use the same maxIdle.
func New(maxIdle int) *State {
	if maxIdle <= 0 {
		maxIdle = DefaultMaxIdleKeys
	}
	return &State{gen: newGeneration(), owners: make(map[string]owned), idle: make(map[string]uint64), maxIdle: maxIdle}
}

// writeGen returns the generation to change index in: a new one if a view
// shares the nodes of the current one.
func (s *State) writeGen() uint64 {
	if s.shared.Load() {
		s.gen = newGeneration()
		s.shared.Store(false)
	}
	return s.gen
}

// lookup returns the current lease of key, nil if there is none.
func (s *State) lookup(key string) *Held { return s.index.get(key) }

// put makes h the current lease of its key.
func (s *State) put(h *Held) {
	s.own(&h.Lease)
	s.index.set(h, s.writeGen())
	delete(s.idle, h.Key)
}

// own counts l against its owner and makes l.Owner the owner's shared
// copy of the name: a million leases of a few owners keep a few names.
func (s *State) own(l *Lease) {
	o, ok := s.owners[l.Owner]
	if !ok {
		o.name = l.Owner
	}
	l.Owner = o.name
	o.count++
	s.owners[o.name] = o
	s.bytes += Cost(l.Key, l.Owner)
}

// drop removes the current lease l.
func (s *State) drop(l *Held) {
	s.index.remove(l.Key, s.writeGen())
	s.bytes -= Cost(l.Key, l.Owner)
	if o := s.owners[l.Owner]; o.count <= 1 {
		delete(s.owners, l.Owner)
	} else {
		o.count--
		s.owners[l.Owner] = o
	}
}

// Apply applies c, written at log index index in leadership term term.
// Indexes must increase from call to call; an index at or below Applied
// changes nothing and returns ErrBadCommand, which makes re-delivery after a
// restore harmless.
//
// An OpExpireBatch whose Term is not term changes nothing and returns
// ErrWrongTerm: expiry is decided on the deadlines one leader tracked, and
// only that leader's term can carry it out. Single OpExpire entries carry no
// term; they come from logs written before OpExpireBatch and apply as they
// did then.
func (s *State) Apply(index, term uint64, c Command) Result {
	if index <= s.applied {
		return Result{Err: ErrBadCommand}
	}
	s.applied = index
	switch c.Op {
	case OpAcquire:
		if l := s.lookup(c.Key); l != nil {
			if !failpoint.Enabled(failpoint.GrantHeld) || index%16 != 0 {
				return Result{Err: &HeldError{Key: l.Key, Owner: l.Owner, Token: l.Token}}
			}
			s.drop(l) // the mutant: the holder is evicted, the key granted
			s.remember(l.Key, l.Token)
		}
		h := &Held{Lease: Lease{Key: c.Key, ID: c.ID, Owner: c.Owner, Token: index, TTL: c.TTL}}
		s.put(h)
		return Result{Event: Event{Type: Acquired, Lease: h.Lease, Revision: index, held: h}}
	case OpRelease:
		return s.end(index, Released, Expiry{Key: c.Key, ID: c.ID, NextID: c.NextID, Owner: c.Owner, TTL: c.TTL})
	case OpExpire:
		return s.end(index, Expired, Expiry{Key: c.Key, ID: c.ID, NextID: c.NextID, Owner: c.Owner, TTL: c.TTL})
	case OpRevoke:
		res := s.end(index, Released, Expiry{Key: c.Key, ID: c.ID, NextID: c.NextID, Owner: c.Owner, TTL: c.TTL})
		if res.Err == nil {
			res.Event.By = c.By
		}
		return res
	case OpExpireBatch:
		if err := c.checkBatch(); err != nil {
			return Result{Err: err}
		}
		if c.Term != term {
			return Result{Err: ErrWrongTerm}
		}
		res := Result{Items: make([]Result, len(c.Expiries))}
		for i, e := range c.Expiries {
			res.Items[i] = s.end(index, Expired, e)
		}
		return res
	}
	return Result{Err: ErrBadCommand}
}

// end ends lease e.ID of e.Key, if current, with an event of type t, and
// hands the key over to e.NextID if set.
func (s *State) end(index uint64, t EventType, e Expiry) Result {
	l := s.lookup(e.Key)
	if l == nil || l.ID != e.ID {
		return Result{Err: ErrNotHeld}
	}
	s.drop(l)
	s.remember(l.Key, l.Token)
	res := Result{Event: Event{Type: t, Lease: l.Lease, Revision: index, held: l}}
	if e.NextID != "" {
		next := &Held{Lease: Lease{Key: e.Key, ID: e.NextID, Owner: e.Owner, Token: index, TTL: e.TTL}}
		if failpoint.Enabled(failpoint.HandoverOldToken) {
			next.Token = l.Token
		}
		s.put(next)
		res.Next = Event{Type: Acquired, Lease: next.Lease, Revision: index, held: next}
	}
	return res
}

func (s *State) remember(key string, token uint64) {
	s.idle[key] = token
	s.queue = append(s.queue, idleKey{key, token})
	for len(s.idle) > s.maxIdle {
		old := s.queue[s.head]
		s.queue[s.head] = idleKey{}
		s.head++
		if t, ok := s.idle[old.key]; ok && t == old.token {
			delete(s.idle, old.key)
		}
	}
	// Entries of keys acquired again stay in the queue until they reach the
	// head; compact once half the queue is dead weight.
	if s.head > len(s.queue)/2 && s.head > 1024 {
		s.queue = append([]idleKey(nil), s.queue[s.head:]...)
		s.head = 0
	}
}

// Get returns the current lease of key.
func (s *State) Get(key string) (Lease, bool) {
	l := s.lookup(key)
	if l == nil {
		return Lease{}, false
	}
	return l.Lease, true
}

// Held returns the state's record of the current lease of key, nil if
// there is none.
func (s *State) Held(key string) *Held { return s.lookup(key) }

// LastToken returns the last token issued for key, or 0 if key is unknown or
// was forgotten.
func (s *State) LastToken(key string) uint64 {
	if l := s.lookup(key); l != nil {
		return l.Token
	}
	return s.idle[key]
}

// Len returns the number of current leases.
func (s *State) Len() int { return s.index.len }

// Bytes returns the Cost of the current leases, summed.
func (s *State) Bytes() int64 { return s.bytes }

// LeaseOverhead is what a current lease costs a node besides its key and
// owner: its record (with the leader's deadline and the client address it
// counts against) and ID, its entries in the state's index, the leader's
// deadlines and the owner counts, and what the leader remembers of its
// grant for rejection reports. It is measured, not derived: 290 to 360
// bytes of live heap per lease at 100,000 to 50,000 leases of the largest
// key and owner, each under an owner of its own, and 570 at 20,000, where
// the node's bounded memory of recent grants weighs more per lease; 640
// leaves room for the maps' growth steps. cmd/fenced's TestAbuseLeaseBytes
// fails when a lease takes more than Cost says.
const LeaseOverhead = 640

// Cost is what a lease of key and owner counts against a budget of bytes
// (fenced's --max-lease-bytes): its key, its owner and LeaseOverhead. An
// owner's name is counted with each of its leases, though they share one
// copy: a cost never depends on other leases.
func Cost(key, owner string) int64 { return int64(len(key)+len(owner)) + LeaseOverhead }

// Applied returns the log index of the last applied command.
func (s *State) Applied() uint64 { return s.applied }

// OwnerLen returns the number of current leases of owner.
func (s *State) OwnerLen(owner string) int { return s.owners[owner].count }

// List returns up to limit current leases whose keys start with prefix,
// sorted by key (all of them when limit <= 0). It costs O(log n + answer).
func (s *State) List(prefix string, limit int) []Lease { return s.view().List(prefix, limit) }

// View returns a frozen view of the current leases. Taking it costs O(1);
// the view never changes, so the caller may release its lock and read the
// view at leisure while the state moves on. It may be taken under a read
// lock, concurrently with other readers.
func (s *State) View() View {
	if !s.shared.Load() {
		s.shared.Store(true) // the next change copies what the view can reach
	}
	return s.view()
}

// view is a View to read under the caller's lock only: the state's next
// change may change it.
func (s *State) view() View { return View{index: s.index, applied: s.applied} }

// View is a read-only, frozen view of a State's leases at one revision. It
// is safe for concurrent use.
type View struct {
	index   index
	applied uint64
}

// Applied returns the log index the view reflects.
func (v View) Applied() uint64 { return v.applied }

// Len returns the number of leases in the view.
func (v View) Len() int { return v.index.len }

// List returns up to limit leases whose keys start with prefix, sorted by
// key (all of them when limit <= 0). It seeks to prefix and stops at the
// first key past it: O(log n + answer).
func (v View) List(prefix string, limit int) []Lease {
	var out []Lease
	v.Scan(prefix, func(l Lease) bool {
		out = append(out, l)
		return limit <= 0 || len(out) < limit
	})
	return out
}

// ListHeld is List with the state's records of the leases (Held).
func (v View) ListHeld(prefix string, limit int) []*Held {
	var out []*Held
	v.ScanHeld(prefix, func(h *Held) bool {
		out = append(out, h)
		return limit <= 0 || len(out) < limit
	})
	return out
}

// Scan calls fn for each lease whose key starts with prefix, in key order,
// until fn returns false.
func (v View) Scan(prefix string, fn func(Lease) bool) {
	v.ScanHeld(prefix, func(h *Held) bool { return fn(h.Lease) })
}

// ScanHeld is Scan with the state's records of the leases (Held).
func (v View) ScanHeld(prefix string, fn func(*Held) bool) {
	v.index.ascend(prefix, func(h *Held) bool {
		return strings.HasPrefix(h.Key, prefix) && fn(h)
	})
}

// Each calls fn for every current lease, in key order, until fn returns
// false.
func (s *State) Each(fn func(Lease) bool) { s.view().Scan("", fn) }

// EachHeld calls fn with the state's record of every current lease, in
// key order, until fn returns false.
func (s *State) EachHeld(fn func(*Held) bool) { s.index.ascend("", fn) }

// Current returns the lease of key if id is its current lease, and
// ErrNotHeld otherwise. Renewal uses it: a renewed lease keeps its token.
func (s *State) Current(key, id string) (Lease, error) {
	l := s.lookup(key)
	if l == nil || l.ID != id {
		return Lease{}, ErrNotHeld
	}
	return l.Lease, nil
}
