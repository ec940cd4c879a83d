package fanout

import (
	"context"
	"sync"
)

// SnapshotShare holds the dashboard snapshot of each prefix being built:
// the dashboards that connect while one is built wait for it instead of
// building their own, then get the transitions after its revision from the
// hub's history. A crowd of dashboards connecting together (a restart, a
// deploy, a shared screen reopening) then costs about one snapshot, not
// one each. A finished snapshot is not handed to later dashboards: each
// sees the leases as of about when it connected, so that a lease that
// ended while a page was not watching its key is absent from the page's
// next snapshot, not replayed to it. The zero SnapshotShare is ready to
// use.
type SnapshotShare struct {
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

// BuildFunc builds the snapshot of the leases under prefix: its JSON and
// the revision it reflects. ok is false when ctx ended first.
type BuildFunc func(ctx context.Context, prefix string) (json []byte, revision uint64, ok bool)

// Subscribe subscribes to h's transitions under prefix and returns the
// subscription with a snapshot of the leases under it (made by build) as
// of revision, and the transitions after revision h had already
// dispatched (replay): every event after revision is in replay or reaches
// sub, exactly once. ok is false when ctx ended first.
//
// The snapshot is shared: built by the first dashboard of a crowd, the
// others that connect while it is built wait for it and take it with the
// transitions since from h's history. When the history no longer reaches
// back to it, a new one is built.
func (sh *SnapshotShare) Subscribe(ctx context.Context, h *Hub, prefix string, build BuildFunc) (sub *Subscription, snapshot []byte, replay []*Event, revision uint64, ok bool) {
	for ctx.Err() == nil {
		b, mine := sh.claim(prefix)
		if mine {
			func() {
				defer close(b.done)
				b.json, b.revision, b.ok = build(ctx, prefix)
			}()
		}
		select {
		case <-b.done:
		case <-ctx.Done():
			return nil, nil, nil, 0, false
		}
		if !b.ok {
			sh.drop(prefix, b)
			continue
		}
		// After revision, or every event when it is 0 (a node that has
		// applied nothing).
		sub, replay, complete := h.Subscribe(prefix, max(b.revision, 1))
		if complete {
			return sub, b.json, replay, b.revision, true
		}
		h.Unsubscribe(sub) // history no longer reaches it: build anew
		sh.drop(prefix, b)
	}
	return nil, nil, nil, 0, false
}

// claim returns the snapshot of prefix to use: the one being built, or a
// new one that the caller must build (mine).
func (sh *SnapshotShare) claim(prefix string) (b *snapshotBuild, mine bool) {
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
func (sh *SnapshotShare) drop(prefix string, b *snapshotBuild) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.builds[prefix] == b {
		delete(sh.builds, prefix)
	}
}
