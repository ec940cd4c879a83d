package server

import (
	"context"
	"testing"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/internal/gen/fenced/v1"
)

// A List beyond the read slots waits for one, and gives up when its caller
// does, instead of running beside the others.
func TestListWaitsForReadSlot(t *testing.T) {
	s := newTestServer(t, Config{})
	v := &service{s}
	for range cap(s.readSlots) {
		s.readSlots <- struct{}{}
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
	for range cap(s.readSlots) {
		<-s.readSlots
	}
	if _, err := v.List(context.Background(), connect.NewRequest(&fencedv1.ListRequest{})); err != nil {
		t.Fatalf("List with free slots: %v", err)
	}
	if n := len(s.readSlots); n != 0 {
		t.Errorf("%d read slots still taken after the List, want 0", n)
	}
}
