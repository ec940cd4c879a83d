package server

import (
	"context"
	"encoding/json"
	"sync"
	"time"
)

// snapshotReuse is how long a dashboard snapshot serves the dashboards
// that connect after it: they get it, then the transitions after its
// revision from the hub's history. A crowd of dashboards connecting
// together (a restart, a deploy, a shared screen reopening) then costs one
// snapshot of up to ListLimit leases, not one each. Its remainingMs values
// are at most this old.
const snapshotReuse = time.Second

// snapshotShare holds the latest dashboard snapshot of each prefix, built
// or being built: the dashboards that connect while one is built wait for
// it instead of building their own.
type snapshotShare struct {
	mu     sync.Mutex
	builds map[string]*snapshotBuild
}

// snapshotBuild is one snapshot of a prefix. json and revision are set
// before done is closed, and never after; ok is false when the build was
// abandoned (its builder's caller left while waiting for a slot).
type snapshotBuild struct {
	done     chan struct{}
	json     []byte
	revision uint64
	at       time.Time
	ok       bool
}

// claim returns the snapshot of prefix to use: a recent or in-flight one,
// or a new one that the caller must build (mine).
func (sh *snapshotShare) claim(prefix string, now time.Time) (b *snapshotBuild, mine bool) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.builds == nil {
		sh.builds = make(map[string]*snapshotBuild)
	}
	if b := sh.builds[prefix]; b != nil && !b.stale(now) {
		return b, false
	}
	for p, old := range sh.builds { // forget stale snapshots of other prefixes
		if old.stale(now) {
			delete(sh.builds, p)
		}
	}
	b = &snapshotBuild{done: make(chan struct{})}
	sh.builds[prefix] = b
	return b, true
}

// stale reports whether b is finished and too old (or abandoned) to reuse.
// Called with sh.mu held.
func (b *snapshotBuild) stale(now time.Time) bool {
	select {
	case <-b.done:
		return !b.ok || now.Sub(b.at) > snapshotReuse
	default:
		return false
	}
}

// drop forgets b if it is still prefix's snapshot, so that the next claim
// builds a new one.
func (sh *snapshotShare) drop(prefix string, b *snapshotBuild) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.builds[prefix] == b {
		delete(sh.builds, prefix)
	}
}

// eventsSnapshot subscribes to the transitions under prefix and returns the
// subscription with the JSON of the current leases under it (at most
// ListLimit) as of revision, and the transitions after revision the hub had
// already dispatched (replay): every event after revision is in replay or
// reaches sub, exactly once. ok is false when ctx ended first.
//
// The snapshot is shared: built by the first dashboard of a crowd, the
// others wait for it, and dashboards connecting within snapshotReuse
// after it take it with the transitions since from the hub's history. When
// the history no longer reaches back to it, a new one is built.
func (s *Server) eventsSnapshot(ctx context.Context, prefix string) (sub *subscription, snapJSON []byte, replay []*hubEvent, revision uint64, ok bool) {
	for ctx.Err() == nil {
		b, mine := s.snapshots.claim(prefix, time.Now())
		if mine {
			s.buildSnapshot(ctx, prefix, b)
		}
		select {
		case <-b.done:
		case <-ctx.Done():
			return nil, nil, nil, 0, false
		}
		if !b.ok {
			s.snapshots.drop(prefix, b)
			continue
		}
		// After revision, or every event when it is 0 (readRevision).
		sub, replay, complete := s.hub.subscribe(prefix, max(b.revision, 1))
		if complete {
			return sub, b.json, replay, b.revision, true
		}
		s.hub.unsubscribe(sub) // history no longer reaches it: build anew
		s.snapshots.drop(prefix, b)
	}
	return nil, nil, nil, 0, false
}

// buildSnapshot builds b, the snapshot of prefix, and closes b.done; b.ok
// stays false if ctx ends while it waits for a slot.
func (s *Server) buildSnapshot(ctx context.Context, prefix string, b *snapshotBuild) {
	defer close(b.done)
	// Building a snapshot costs O(ListLimit) memory and CPU; at most
	// snapshotSlots are built at once (of different prefixes).
	select {
	case s.snapshotSlots <- struct{}{}:
	case <-ctx.Done():
		return
	}
	defer func() { <-s.snapshotSlots }()
	// And it is a read like a List: it waits for a read slot too.
	release, err := s.reads.acquire(ctx)
	if err != nil {
		return
	}
	defer release()
	view := s.fsm.view()
	leases := view.List(prefix, s.cfg.ListLimit)
	remaining := s.expirer.remainingOf(leases, s.expirer.now())
	snap := struct {
		Revision uint64      `json:"revision"`
		Leases   []leaseJSON `json:"leases"`
	}{Revision: view.Applied(), Leases: make([]leaseJSON, len(leases))}
	for i, l := range leases {
		snap.Leases[i] = dashboardLease(wireLease(l, remaining[i], publicView))
	}
	b.json, _ = json.Marshal(snap)
	b.revision, b.at, b.ok = snap.Revision, time.Now(), true
}
