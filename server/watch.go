package server

import (
	"strings"
	"sync"

	"github.com/fencedio/fenced/lease"
)

// hub fans applied events out to watchers. It keeps the last events so a
// watcher can resume after a revision, and never blocks the apply path: a
// watcher whose buffer is full is cut off and told to resync.
type hub struct {
	mu      sync.Mutex
	history []lease.Event // ring, oldest at start
	start   int
	size    int
	// floor is the highest revision whose events may be missing from
	// history: evicted, or from before the snapshot this node restored.
	floor  uint64
	subs   map[*subscription]struct{}
	buffer int
}

type subscription struct {
	prefix string
	events chan lease.Event
	// lost is closed when the subscriber fell behind and was dropped.
	lost chan struct{}
}

func newHub(history, buffer int) *hub {
	return &hub{history: make([]lease.Event, history), subs: make(map[*subscription]struct{}), buffer: buffer}
}

func (h *hub) publish(ev lease.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.history) > 0 {
		if h.size == len(h.history) {
			h.floor = h.history[h.start].Revision
			h.start = (h.start + 1) % len(h.history)
			h.size--
		}
		h.history[(h.start+h.size)%len(h.history)] = ev
		h.size++
	}
	for s := range h.subs {
		if !strings.HasPrefix(ev.Lease.Key, s.prefix) {
			continue
		}
		select {
		case s.events <- ev:
		default:
			delete(h.subs, s)
			close(s.lost)
		}
	}
}

// restored forgets history older than a snapshot taken at revision.
func (h *hub) restored(revision uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.start, h.size = 0, 0
	h.floor = max(h.floor, revision)
	for s := range h.subs {
		delete(h.subs, s)
		close(s.lost)
	}
}

// subscribe registers a watcher of prefix. When after > 0 it also returns
// the kept events after that revision, and complete=false if some may be
// missing.
func (h *hub) subscribe(prefix string, after uint64) (s *subscription, replay []lease.Event, complete bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s = &subscription{prefix: prefix, events: make(chan lease.Event, h.buffer), lost: make(chan struct{})}
	h.subs[s] = struct{}{}
	if after == 0 {
		return s, nil, true
	}
	for i := 0; i < h.size; i++ {
		ev := h.history[(h.start+i)%len(h.history)]
		if ev.Revision > after && strings.HasPrefix(ev.Lease.Key, prefix) {
			replay = append(replay, ev)
		}
	}
	return s, replay, after >= h.floor
}

func (h *hub) unsubscribe(s *subscription) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.subs, s)
}

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
