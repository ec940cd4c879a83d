package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/internal/fencedtest"
)

// TestWaitedAcquireCutByDeadline checks that a waited Acquire whose
// caller's deadline ends before the wait always returns an error matching
// context.DeadlineExceeded, never a *HeldError, whichever side notices the
// deadline first.
func TestWaitedAcquireCutByDeadline(t *testing.T) {
	t.Parallel()
	srv := fencedtest.Start(t)
	c := srv.Client(t, client.Config{TTL: time.Minute})
	holder, err := c.Acquire(t.Context(), "cut/k")
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release(context.Background())
	for i := range 8 {
		ctx, cancel := context.WithTimeout(t.Context(), time.Duration(50+20*i)*time.Millisecond)
		l, err := c.Acquire(ctx, "cut/k", client.WithWait(10*time.Second))
		cancel()
		if err == nil {
			l.Release(context.Background())
			t.Fatalf("attempt %d: acquired a held key", i)
		}
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, client.ErrHeld) {
			t.Fatalf("attempt %d: %v; want an error matching context.DeadlineExceeded and not ErrHeld", i, err)
		}
	}
}
