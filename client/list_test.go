package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/internal/fencedtest"
)

// TestListRevisionThenWatch checks that Watch from ListRevision's revision
// starts with the first transition after the List, not one before it.
func TestListRevisionThenWatch(t *testing.T) {
	t.Parallel()
	srv := fencedtest.Start(t)
	c := srv.Client(t, client.Config{TTL: time.Minute})
	ctx := t.Context()
	a, err := c.Acquire(ctx, "lr/a")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release(context.Background())
	leases, rev, err := c.ListRevision(ctx, "lr/", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(leases) != 1 || leases[0].Token != a.Token() || rev < a.Token() {
		t.Fatalf("ListRevision = %+v at %d; want lr/a (token %d) at a revision >= it", leases, rev, a.Token())
	}
	b, err := c.Acquire(ctx, "lr/b")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release(context.Background())
	stop := errors.New("stop")
	var first client.Event
	err = c.Watch(ctx, "lr/", rev, func(ev client.Event) error { first = ev; return stop })
	if !errors.Is(err, stop) {
		t.Fatalf("Watch: %v", err)
	}
	if first.Type != client.Acquired || first.Lease.Key != "lr/b" || first.Revision <= rev {
		t.Fatalf("first event after revision %d: %+v; want lr/b acquired", rev, first)
	}
}
