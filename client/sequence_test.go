package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/internal/fencedtest"
)

// NextSequence starts at 1 for each lease (each token) and counts up; a
// Sequenced lease's DoLease writes are each applied once, and a copy of
// one (the same sequence again) is a duplicate, not stale.
func TestLeaseNextSequence(t *testing.T) {
	t.Parallel()
	srv := fencedtest.Start(t)
	c := srv.Client(t, client.Config{TTL: 10 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := c.Acquire(ctx, "seq/1")
	if err != nil {
		t.Fatal(err)
	}
	for want := uint64(1); want <= 3; want++ {
		if got := l.NextSequence(); got != want {
			t.Fatalf("NextSequence = %d, want %d", got, want)
		}
	}
	g := fence.NewMemory(fence.MemoryConfig{})
	sl := fence.Sequenced(l)
	for range 2 {
		if err := fence.DoLease(ctx, g, sl, func(ctx context.Context) error {
			if q := fence.SequenceFromContext(ctx); q < 4 {
				t.Errorf("write carried sequence %d, want the lease's next (4 or 5)", q)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	err = g.Do(fence.WithSequence(ctx, 5), l.Key(), l.Token(), func(context.Context) error { return nil })
	if !errors.Is(err, fence.ErrDuplicate) || l.Err() != nil {
		t.Fatalf("copy of write 5: %v (lease: %v); want a duplicate, lease kept", err, l.Err())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l2, err := c.Acquire(ctx, "seq/1")
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Release(ctx)
	if got := l2.NextSequence(); got != 1 || l2.Token() <= l.Token() {
		t.Fatalf("new lease: NextSequence %d token %d (old %d); want 1 and a higher token", got, l2.Token(), l.Token())
	}
}
