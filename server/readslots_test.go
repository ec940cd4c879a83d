package server

import (
	"context"
	"testing"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
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
