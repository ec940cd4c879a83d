package server

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
)

// A List beyond the read slots waits for one, and gives up when its caller
// does, instead of running beside the others.
func TestListWaitsForReadSlot(t *testing.T) {
	s := newTestServer(t, Config{})
	v := &service{s}
	var taken []time.Time
	for range cap(s.reads.slots) {
		taken = append(taken, <-s.reads.slots)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := v.List(ctx, connect.NewRequest(&fencedv1.ListRequest{}))
		done <- err
	}()
	cancel()
	if err := <-done; connect.CodeOf(err) != connect.CodeCanceled {
		t.Fatalf("List with every read slot taken, caller gone: %v, want canceled", err)
	}
	for _, next := range taken {
		s.reads.slots <- next
	}
	if _, err := v.List(context.Background(), connect.NewRequest(&fencedv1.ListRequest{})); err != nil {
		t.Fatalf("List with free slots: %v", err)
	}
	if n := len(s.reads.slots); n != cap(s.reads.slots) {
		t.Errorf("%d of %d read slots free after the List, want all", n, cap(s.reads.slots))
	}
}

// While writes wait, a slot whose read took d rests d*(1-share)/share
// before its next read; with no write waiting it serves at once.
func TestReadGateRestsWhileWritesWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		writes := true
		g := newShareGate(1, 0.25, 0, func() bool { return writes })
		release, err := g.acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(30 * time.Millisecond) // the read
		release()
		start := time.Now()
		release, err = g.acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if got, want := time.Since(start), 90*time.Millisecond; got != want {
			t.Errorf("next read after a 30ms read with writes waiting started after %v, want %v", got, want)
		}
		time.Sleep(30 * time.Millisecond)
		release()
		writes = false
		start = time.Now()
		release, err = g.acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		release()
		if got := time.Since(start); got != 0 {
			t.Errorf("read with no write waiting started after %v, want at once", got)
		}
		// A reader that leaves while its slot rests gives the slot back.
		writes = true
		release, _ = g.acquire(context.Background())
		time.Sleep(30 * time.Millisecond)
		release()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { _, err := g.acquire(ctx); done <- err }()
		synctest.Wait() // resting
		cancel()
		if err := <-done; err == nil {
			t.Fatal("acquire with its caller gone while the slot rests succeeded")
		}
		if len(g.slots) != 1 {
			t.Errorf("slot not given back after a canceled acquire")
		}
	})
}

// Dashboards that connect while a snapshot is built share it; a finished or
// abandoned one is built anew, so that a page's snapshot is as of about when
// it connected.
func TestSnapshotShareClaim(t *testing.T) {
	var sh snapshotShare
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

// A dashboard given a shared snapshot gets every transition after it
// exactly once, from the replay or its subscription.
func TestSharedSnapshotNoGapNoDuplicate(t *testing.T) {
	s := newTestServer(t, Config{})
	ctx := context.Background()
	if _, err := s.Acquire(ctx, "d/1", "o", time.Minute, 0); err != nil {
		t.Fatal(err)
	}
	sub1, _, _, rev1, ok := s.eventsSnapshot(ctx, "d/")
	if !ok {
		t.Fatal("first snapshot failed")
	}
	defer s.hub.unsubscribe(sub1)
	if _, err := s.Acquire(ctx, "d/2", "o", time.Minute, 0); err != nil {
		t.Fatal(err)
	}
	for seen := false; !seen; { // until the acquisition of d/2 is dispatched
		<-sub1.ready
		for _, ev := range sub1.take() {
			seen = seen || ev.Lease.Key == "d/2" && ev.Revision > rev1
		}
	}
	sub2, json2, replay, rev2, ok := s.eventsSnapshot(ctx, "d/")
	if !ok {
		t.Fatal("second snapshot failed")
	}
	defer s.hub.unsubscribe(sub2)
	var snap struct {
		Leases []leaseJSON `json:"leases"`
	}
	if err := json.Unmarshal(json2, &snap); err != nil {
		t.Fatal(err)
	}
	inSnap := slices.ContainsFunc(snap.Leases, func(l leaseJSON) bool { return l.Key == "d/2" })
	inReplay := slices.ContainsFunc(replay, func(ev *hubEvent) bool { return ev.Lease.Key == "d/2" && ev.Revision > rev2 })
	if inSnap == inReplay {
		t.Fatalf("d/2 in the snapshot: %v, in the replay: %v; want exactly one", inSnap, inReplay)
	}
}
