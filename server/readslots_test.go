package server

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/server/internal/fanout"
)

// A List beyond the read slots waits for one, and gives up when its caller
// does, instead of running beside the others.
func TestListWaitsForReadSlot(t *testing.T) {
	s := newTestServer(t, Config{})
	v := s.leaseService()
	// A stale read: served here, without a leadership check first.
	list := func(ctx context.Context) error {
		req := connect.NewRequest(&fencedv1.ListRequest{})
		req.Header().Set("Fenced-Stale-Read", "true")
		_, err := v.List(ctx, req)
		return err
	}
	giveBack := s.reads.Seize()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- list(ctx) }()
	cancel()
	if err := <-done; connect.CodeOf(err) != connect.CodeCanceled {
		t.Fatalf("List with every read slot taken, caller gone: %v, want canceled", err)
	}
	giveBack()
	if err := list(context.Background()); err != nil {
		t.Fatalf("List with free slots: %v", err)
	}
	if free, total := s.reads.Free(); free != total {
		t.Errorf("%d of %d read slots free after the List, want all", free, total)
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
	sub1, _, _, rev1, ok := s.snapshots.Subscribe(ctx, s.hub, "d/", s.buildSnapshot)
	if !ok {
		t.Fatal("first snapshot failed")
	}
	defer s.hub.Unsubscribe(sub1)
	if _, err := s.Acquire(ctx, "d/2", "o", time.Minute, 0); err != nil {
		t.Fatal(err)
	}
	for seen := false; !seen; { // until the acquisition of d/2 is dispatched
		<-sub1.Ready()
		for _, ev := range sub1.Take() {
			seen = seen || ev.Lease.Key == "d/2" && ev.Revision > rev1
		}
	}
	sub2, json2, replay, rev2, ok := s.snapshots.Subscribe(ctx, s.hub, "d/", s.buildSnapshot)
	if !ok {
		t.Fatal("second snapshot failed")
	}
	defer s.hub.Unsubscribe(sub2)
	var snap struct {
		Leases []struct {
			Key string `json:"key"`
		} `json:"leases"`
	}
	if err := json.Unmarshal(json2, &snap); err != nil {
		t.Fatal(err)
	}
	inSnap := slices.ContainsFunc(snap.Leases, func(l struct {
		Key string `json:"key"`
	}) bool {
		return l.Key == "d/2"
	})
	inReplay := slices.ContainsFunc(replay, func(ev *fanout.Event) bool { return ev.Lease.Key == "d/2" && ev.Revision > rev2 })
	if inSnap == inReplay {
		t.Fatalf("d/2 in the snapshot: %v, in the replay: %v; want exactly one", inSnap, inReplay)
	}
}
