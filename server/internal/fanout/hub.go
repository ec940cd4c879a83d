package fanout

import (
	"strings"
	"sync"
	"sync/atomic"
	"time"

	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/lease"
)

// Hub fans applied events out to watchers. It keeps the last events so a
// watcher can resume after a revision.
//
// The apply path only appends each event to a queue (Publish, O(1), never
// blocks); a dispatcher goroutine (Run) moves them into the history and
// into the watchers' queues. So however many watchers there are, and however
// slow, the raft apply goroutine does the same work. Each event is wrapped
// once in an Event that every watcher shares, with its Watch message built
// once and its other encodings made once, on first use.
//
// While nobody watches, a transition does not wake the dispatcher: up to
// idleBatch of them wait in the queue and go into the history together,
// or when the next watcher subscribes, which dispatches them itself
// first. So a node nobody watches spends one wake-up per idleBatch
// transitions on its history, not one per transition, and a watcher that
// resumes finds every transition in the history as before.
//
// A watcher's queue starts empty and grows only as far as it falls behind,
// up to buffer events; one that falls further is cut off (Lost is closed)
// and told to resync.
type Hub struct {
	inMu    sync.Mutex
	in      []item        // published, not yet dispatched
	inReady chan struct{} // cap 1: signalled when in has items to dispatch
	// watchers is len(subs), for publishers: while it is 0 they wake the
	// dispatcher only every idleBatch transitions.
	watchers atomic.Int64

	mu      sync.Mutex // guards everything below; held by the dispatcher
	spareIn []item     // an empty array for the next in
	history []*Event   // ring, oldest at start
	start   int
	size    int
	// floor is the highest revision whose events may be missing from
	// history: evicted, or from before the snapshot this node restored.
	floor uint64
	// last is the revision of the last transition dispatched, or of the
	// snapshot restored since.
	last   uint64
	subs   map[*Subscription]struct{}
	buffer int
	// message is the Watch event of a transition.
	message func(lease.Event) *fencedv1.Event

	// kept maps the Watch message of every event in history to its event,
	// for sharingCodec. An event evicted while still queued for a slow
	// watcher is simply encoded again for it.
	keptMu sync.RWMutex
	kept   map[*fencedv1.WatchResponse]*Event
}

// item is one published event, or (ev nil) a restore at revision.
type item struct {
	ev       *Event
	restored uint64
}

// Event is one event as every watcher shares it. Its Watch message is
// built by the dispatcher and never modified after; its encodings are made
// by the first subscriber that needs each.
type Event struct {
	lease.Event
	watch *fencedv1.WatchResponse
	// rejection marks a REJECTED event (rejections.go): not kept in
	// history, sent only to subscriptions that asked for rejections.
	rejection bool
	// relayed marks a REJECTED event recorded by the leader, not this node.
	relayed bool

	frameOnce sync.Once
	frame     []byte
	enc       [numSlots]encoding // by sharingCodec
}

// Frame returns the event encoded by encode (the dashboard's frame), made
// on the first call only and shared by every later caller.
func (e *Event) Frame(encode func(lease.Event) []byte) []byte {
	e.frameOnce.Do(func() { e.frame = encode(e.Event) })
	return e.frame
}

// Subscription is one watcher's queue of events, filled by the dispatcher.
type Subscription struct {
	prefix string
	// after: the transitions up to this revision are not queued. They were
	// applied before the subscriber's starting point but dispatched after
	// it subscribed.
	after uint64

	mu    sync.Mutex
	queue []*Event      // grows on demand, at most Hub.buffer
	spare []*Event      // an empty array for the next queue (Recycle)
	ready chan struct{} // cap 1: signalled when queue becomes non-empty
	// lost is closed when the subscriber fell behind and was dropped.
	lost chan struct{}
	// rejections: also queue REJECTED events.
	rejections atomic.Bool
	// relay: another node's relay of the rejections this node records;
	// queues no transitions (rejections.go).
	relay bool
}

func newSubscription(prefix string, after uint64) *Subscription {
	return &Subscription{prefix: prefix, after: after, ready: make(chan struct{}, 1), lost: make(chan struct{})}
}

// Ready receives when events were queued since the last Take.
func (s *Subscription) Ready() <-chan struct{} { return s.ready }

// Lost is closed when the subscriber fell more than the hub's buffer
// behind and was dropped: it is offered nothing more, and what was queued
// before is still there to Take.
func (s *Subscription) Lost() <-chan struct{} { return s.lost }

// WantRejections sets whether REJECTED events are queued too.
func (s *Subscription) WantRejections(want bool) { s.rejections.Store(want) }

// Take returns the queued events and empties the queue.
func (s *Subscription) Take() []*Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queue
	s.queue, s.spare = s.spare, nil
	return q
}

// Recycle gives back q, taken and sent, as the array of a later queue:
// thousands of watchers refilling their queues every round otherwise make
// garbage enough to keep the GC scanning the leases.
func (s *Subscription) Recycle(q []*Event) {
	clear(q[:cap(q)])
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.spare == nil && cap(q) > 0 {
		s.spare = q[:0]
	}
}

// NewHub returns a hub that keeps the last history transitions for
// resuming watchers and cuts off a watcher more than buffer events behind.
// message makes the Watch event of a transition, once per transition.
func NewHub(history, buffer int, message func(lease.Event) *fencedv1.Event) *Hub {
	return &Hub{history: make([]*Event, history), subs: make(map[*Subscription]struct{}), buffer: buffer,
		message: message, inReady: make(chan struct{}, 1), kept: make(map[*fencedv1.WatchResponse]*Event)}
}

// Publish queues ev for the dispatcher. It is called by the apply path and
// never blocks on watchers.
func (h *Hub) Publish(ev lease.Event) {
	h.enqueue(item{ev: &Event{Event: ev}}, false)
}

// Restored forgets history older than a snapshot taken at revision, and
// drops every watcher, once the events published before it are dispatched.
func (h *Hub) Restored(revision uint64) { h.enqueue(item{restored: revision}, true) }

// idleBatch is how many transitions wait for the dispatcher while nobody
// watches: enough that its wake-ups cost next to nothing per transition,
// few enough that their memory does not matter.
const idleBatch = 64

// enqueue queues it and wakes the dispatcher, unless nobody watches, it is
// a transition (not urgent) and fewer than idleBatch items wait. The next
// Subscribe dispatches what waits before it reads the history.
func (h *Hub) enqueue(it item, urgent bool) {
	h.inMu.Lock()
	h.in = append(h.in, it)
	waiting := len(h.in)
	h.inMu.Unlock()
	// Read after the append: a Subscribe that counted itself before
	// this load is seen here, one that counts itself after it finds it
	// in (see join).
	if !urgent && waiting < idleBatch && h.watchers.Load() == 0 {
		return
	}
	select {
	case h.inReady <- struct{}{}:
	default:
	}
}

// Run dispatches published events until done is closed. Under load it
// dispatches at most once per roundInterval(watchers): the events
// published meanwhile go out together, so each watcher wakes, sends and
// flushes once per round for many events instead of once per event. The
// first event after a quiet spell goes out at once.
func (h *Hub) Run(done <-chan struct{}) {
	var last time.Time
	watchers := 0
	for {
		select {
		case <-done:
			return
		case <-h.inReady:
		}
		if wait := time.Until(last.Add(roundInterval(watchers))); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-done:
				t.Stop()
				return
			case <-t.C:
			}
		}
		last = time.Now()
		h.mu.Lock()
		watchers = h.dispatchWaiting()
		h.mu.Unlock()
	}
}

// dispatchWaiting dispatches the items published and not yet dispatched,
// and returns the number of subscriptions. Called with h.mu held, so that
// the dispatcher and Subscribe dispatch in the order of publication.
func (h *Hub) dispatchWaiting() int {
	h.inMu.Lock()
	batch := h.in
	h.in = h.spareIn
	h.inMu.Unlock()
	n := h.dispatch(batch)
	clear(batch)
	h.spareIn = batch[:0]
	return n
}

// roundInterval is the least time between two dispatch rounds with n
// watchers: 25µs per watcher, at most 50ms (reached at 2,000 watchers). A
// round costs each watcher it wakes a frame, a flush and a system call
// (about 3µs of the server's CPU on a loopback connection, and as much for
// the client), whether it carries one event or a hundred: so per-frame
// work stays well under a core however many watchers there are, and the
// rest of a round's cost is per event. 50ms of events stays well under a
// watcher's queue (WatchBuffer) at the write rates a node sustains.
func roundInterval(n int) time.Duration {
	return min(time.Duration(n)*25*time.Microsecond, 50*time.Millisecond)
}

// dispatch moves batch into the history and the watchers' queues, and
// returns the number of subscriptions. The transitions of a batch reach
// each watcher together: one lock and one wake-up per watcher per round,
// not per event, so a round's cost in watchers stays small however many
// events it carries. Called with h.mu held.
func (h *Hub) dispatch(batch []item) int {
	var evs []*Event // kept, not yet offered to the watchers
	for _, it := range batch {
		switch {
		case it.ev == nil:
			h.fanOut(evs)
			evs = evs[:0]
			h.restore(it.restored)
		case it.ev.rejection:
			h.fanOut(evs)
			evs = evs[:0]
			h.deliverRejection(it.ev)
		default:
			h.keep(it.ev)
			evs = append(evs, it.ev)
		}
	}
	h.fanOut(evs)
	return len(h.subs)
}

// restore forgets the history up to a snapshot restored at revision and
// drops every watcher. Called by the dispatcher with h.mu held.
func (h *Hub) restore(revision uint64) {
	for i := 0; i < h.size; i++ {
		h.forget(h.history[(h.start+i)%len(h.history)])
		h.history[(h.start+i)%len(h.history)] = nil
	}
	h.start, h.size = 0, 0
	h.floor = max(h.floor, revision)
	h.last = max(h.last, revision)
	for s := range h.subs {
		delete(h.subs, s)
		close(s.lost)
	}
	h.watchers.Store(0)
}

// keep builds ev's Watch message and adds ev to the history, evicting the
// oldest event when it is full. Called by the dispatcher with h.mu held.
func (h *Hub) keep(ev *Event) {
	ev.watch = &fencedv1.WatchResponse{Event: h.message(ev.Event)}
	h.last = ev.Revision
	if len(h.history) == 0 {
		return
	}
	if h.size == len(h.history) {
		h.floor = h.history[h.start].Revision
		h.forget(h.history[h.start])
		h.history[h.start] = nil
		h.start = (h.start + 1) % len(h.history)
		h.size--
	}
	h.history[(h.start+h.size)%len(h.history)] = ev
	h.size++
	h.keptMu.Lock()
	h.kept[ev.watch] = ev
	h.keptMu.Unlock()
}

// fanOut offers evs, transitions in revision order, to every watcher of a
// prefix they match, each watcher's share at once. Called by the
// dispatcher with h.mu held.
func (h *Hub) fanOut(evs []*Event) {
	if len(evs) == 0 {
		return
	}
	byPrefix := map[string][]*Event{"": evs} // the events under each prefix
	for s := range h.subs {
		if s.relay {
			continue
		}
		mine, ok := byPrefix[s.prefix]
		if !ok {
			for _, ev := range evs {
				if strings.HasPrefix(ev.Lease.Key, s.prefix) {
					mine = append(mine, ev)
				}
			}
			byPrefix[s.prefix] = mine
		}
		if len(mine) > 0 {
			h.offer(s, mine)
		}
	}
}

// offer queues evs for s, or as many as fit and then cuts s off (lost)
// when its queue would hold more than buffer events. Called by the
// dispatcher with h.mu held.
func (h *Hub) offer(s *Subscription, evs []*Event) {
	for len(evs) > 0 && !evs[0].rejection && evs[0].Revision <= s.after {
		evs = evs[1:] // in revision order
	}
	if len(evs) == 0 {
		return
	}
	s.mu.Lock()
	n := min(len(evs), max(h.buffer-len(s.queue), 0))
	s.queue = append(s.queue, evs[:n]...)
	s.mu.Unlock()
	if n < len(evs) {
		delete(h.subs, s)
		h.watchers.Store(int64(len(h.subs)))
		close(s.lost)
		return
	}
	select {
	case s.ready <- struct{}{}:
	default:
	}
}

func (h *Hub) forget(ev *Event) {
	h.keptMu.Lock()
	delete(h.kept, ev.watch)
	h.keptMu.Unlock()
}

// encoded returns the kept event whose Watch message is w, or nil.
func (h *Hub) encoded(w *fencedv1.WatchResponse) *Event {
	h.keptMu.RLock()
	defer h.keptMu.RUnlock()
	return h.kept[w]
}

// Subscribe registers a watcher of the transitions under prefix after
// revision after. When after > 0 it also returns the kept events after that
// revision, and complete=false if some may be missing. Resuming scans the
// kept history (at most history events), never the leases. With after 0
// the watcher is offered every transition dispatched from now on,
// including those applied before the call but not yet dispatched: to start
// at a state read, pass its revision.
func (h *Hub) Subscribe(prefix string, after uint64) (s *Subscription, replay []*Event, complete bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s = newSubscription(prefix, after)
	if after == 0 {
		h.join(s, true)
		return s, nil, true
	}
	h.join(s, false)
	for i := 0; i < h.size; i++ {
		ev := h.history[(h.start+i)%len(h.history)]
		if ev.Revision > after && strings.HasPrefix(ev.Lease.Key, prefix) {
			replay = append(replay, ev)
		}
	}
	return s, replay, after >= h.floor
}

// Unsubscribe stops offering events to s.
func (h *Hub) Unsubscribe(s *Subscription) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.subs, s)
	h.watchers.Store(int64(len(h.subs)))
}

// join registers s. If nobody watched, transitions may wait undispatched
// (enqueue): join dispatches them, offered to s if offerWaiting, else
// only into the history that s replays from. s is counted first, so that
// a transition published meanwhile is either among those or wakes the
// dispatcher. Called with h.mu held.
func (h *Hub) join(s *Subscription, offerWaiting bool) {
	idle := len(h.subs) == 0
	h.watchers.Store(int64(len(h.subs) + 1))
	if offerWaiting {
		h.subs[s] = struct{}{}
	}
	if idle {
		h.dispatchWaiting() // may drop s (restore, or cut off)
	}
	if !offerWaiting {
		h.subs[s] = struct{}{}
	}
	h.watchers.Store(int64(len(h.subs)))
}

// Watching returns the number of subscriptions.
func (h *Hub) Watching() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}
