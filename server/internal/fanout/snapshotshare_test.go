package fanout

import (
	"context"
	"fmt"
	"slices"
	"testing"
)

// Dashboards that connect while a snapshot is built share it; a finished or
// abandoned one is built anew, so that a page's snapshot is as of about when
// it connected.
func TestSnapshotShareClaim(t *testing.T) {
	var sh SnapshotShare
	b, mine := sh.claim("a/")
	if !mine {
		t.Fatal("first claim: not asked to build")
	}
	if b2, mine2 := sh.claim("a/"); b2 != b || mine2 {
		t.Fatal("claim while the snapshot is built: not given the one in flight")
	}
	if _, mine := sh.claim("b/"); !mine {
		t.Fatal("claim of another prefix shares the snapshot of a/")
	}
	b.ok = true
	close(b.done)
	b3, mine3 := sh.claim("a/")
	if b3 == b || !mine3 {
		t.Fatal("claim after the snapshot was built: given the finished one")
	}
	close(b3.done) // abandoned: ok false
	if b4, mine4 := sh.claim("a/"); b4 == b3 || !mine4 {
		t.Fatal("claim after an abandoned build: given it")
	}
}

// A shared snapshot older than the hub's history is built anew, since the
// transitions after it can no longer be replayed; one whose build was
// abandoned is built anew too.
func TestSnapshotShareRebuildsPastHistory(t *testing.T) {
	h, _ := keptEvents(t, 1, 5, 6) // 5 evicted: the history starts after it
	var sh SnapshotShare
	var built []uint64
	revs := []uint64{0, 4, 6} // abandoned, too old, current
	build := func(ctx context.Context, prefix string) ([]byte, uint64, bool) {
		rev := revs[len(built)]
		built = append(built, rev)
		return []byte(fmt.Sprint("snapshot ", rev)), rev, rev != 0
	}
	sub, snap, replay, rev, ok := sh.Subscribe(context.Background(), h, "k/", build)
	if !ok || rev != 6 || string(snap) != "snapshot 6" || len(replay) != 0 {
		t.Fatalf("got %q at %d (ok %v, replay %d), want the snapshot at 6", snap, rev, ok, len(replay))
	}
	if !slices.Equal(built, revs) {
		t.Errorf("built %v, want %v", built, revs)
	}
	if n := h.Watching(); n != 1 {
		t.Errorf("%d subscriptions, want the one returned only", n)
	}
	h.Unsubscribe(sub)
}

// A dashboard that leaves while its snapshot is built gets nothing and
// leaves no subscription behind.
func TestSnapshotShareCallerLeaves(t *testing.T) {
	h := NewHub(4, 4, watchEvent)
	var sh SnapshotShare
	ctx, cancel := context.WithCancel(context.Background())
	build := func(ctx context.Context, prefix string) ([]byte, uint64, bool) {
		cancel()
		return nil, 0, false
	}
	if _, _, _, _, ok := sh.Subscribe(ctx, h, "", build); ok {
		t.Fatal("Subscribe succeeded after its caller left")
	}
	if n := h.Watching(); n != 0 {
		t.Errorf("%d subscriptions left behind", n)
	}
}
