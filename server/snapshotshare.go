package server

import (
	"context"
	"encoding/json"
	"sync"
)

// snapshotShare holds the dashboard snapshot of each prefix being built:
// the dashboards that connect while one is built wait for it instead of
// building their own, then get the transitions after its revision from the
// hub's history. A crowd of dashboards connecting together (a restart, a
// deploy, a shared screen reopening) then costs about one snapshot of up to
// ListLimit leases, not one each. A finished snapshot is not handed to
// later dashboards: each sees the leases as of about when it connected, so
// that a lease that ended while a page was not watching its key is absent
// from the page's next snapshot, not replayed to it.
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
	ok       bool
}

// claim returns the snapshot of prefix to use: the one being built, or a
// new one that the caller must build (mine).
func (sh *snapshotShare) claim(prefix string) (b *snapshotBuild, mine bool) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.builds == nil {
		sh.builds = make(map[string]*snapshotBuild)
	}
	if b := sh.builds[prefix]; b != nil && !b.finished() {
		return b, false
	}
	for p, old := range sh.builds { // forget finished snapshots
		if old.finished() {
			delete(sh.builds, p)
		}
	}
	b = &snapshotBuild{done: make(chan struct{})}
	sh.builds[prefix] = b
	return b, true
}

// finished reports whether b is built (or abandoned). Called with sh.mu
// held.
func (b *snapshotBuild) finished() bool {
	select {
	case <-b.done:
		return true
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
// others that connect while it is built wait for it and take it with the
// transitions since from the hub's history. When the history no longer
// reaches back to it, a new one is built.
func (s *Server) eventsSnapshot(ctx context.Context, prefix string) (sub *subscription, snapJSON []byte, replay []*hubEvent, revision uint64, ok bool) {
	for ctx.Err() == nil {
		b, mine := s.snapshots.claim(prefix)
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
	release, err := s.reads.Acquire(ctx)
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
	b.revision, b.ok = snap.Revision, true
}
