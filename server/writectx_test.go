package server

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/fencedio/fenced/internal/testutil"
	"github.com/fencedio/fenced/lease"
	"github.com/fencedio/fenced/server/internal/apierr"
	"github.com/hashicorp/raft"
)

// gatedServer is a node whose log writes can be held, like a hung disk.
func gatedServer(t *testing.T) (s *Server, hold func() (release func())) {
	store := &gatedLogStore{gate: make(chan chan struct{}, 1)}
	s = newTestServer(t, Config{
		wrapLogStore: func(ls raft.LogStore) raft.LogStore { store.LogStore = ls; return store },
	})
	return s, func() func() {
		ch := make(chan struct{})
		var once sync.Once
		release := func() { once.Do(func() { close(ch) }) }
		t.Cleanup(release) // before Close
		store.gate <- ch
		return release
	}
}

// An acquisition whose context ends while its grant is being written
// returns at once with an uncertain outcome (deadline_exceeded, as
// docs/protocol.md says: it may have been granted; never "not applied"),
// and the grant may indeed take effect afterwards.
func TestAcquireWriteHonoursContext(t *testing.T) {
	s, hold := gatedServer(t)
	release := hold()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := s.Acquire(ctx, "gated/k", "o", time.Minute, 0)
		done <- err
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Acquire still waits for a held log write 10s after its context ended")
	}
	if !errors.Is(err, apierr.ErrUncertain) || connect.CodeOf(apierr.Connect(err)) != connect.CodeDeadlineExceeded {
		t.Fatalf("Acquire cut by its context: %v (%v), want an uncertain outcome, deadline_exceeded", err, connect.CodeOf(apierr.Connect(err)))
	}
	release()
	testutil.Eventually(t, 10*time.Second, func() error {
		if l, ok := s.currentOf("gated/k"); !ok || l.Owner != "o" {
			return errors.New("the grant whose answer was cut has not taken effect")
		}
		return nil
	})
}

// A release cut by its context still hands the key to the waiter it was
// handing it to, once the write is done: the waiter gets the grant.
func TestReleaseCutByContextStillHandsOver(t *testing.T) {
	s, hold := gatedServer(t)
	a, err := s.Acquire(context.Background(), "gated/h", "A", time.Minute, 0)
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan lease.Lease, 1)
	go func() {
		l, err := s.Acquire(context.Background(), "gated/h", "B", time.Minute, 30*time.Second)
		if err != nil {
			t.Errorf("waiter: %v", err)
		}
		waited <- l
	}()
	testutil.Eventually(t, 10*time.Second, func() error {
		if s.waiters.Len() != 1 {
			return errors.New("the waiter has not queued")
		}
		return nil
	})
	release := hold()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	released := make(chan error, 1)
	go func() { released <- s.Release(ctx, "gated/h", a.ID) }()
	select {
	case err := <-released:
		if !errors.Is(err, apierr.ErrUncertain) {
			t.Fatalf("Release cut by its context: %v, want an uncertain outcome", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Release still waits for a held log write 10s after its context ended")
	}
	release()
	select {
	case l := <-waited:
		if l.Owner != "B" || l.Token <= a.Token {
			t.Fatalf("waiter got %+v after a lease with token %d", l, a.Token)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter never got the key handed over by the cut release")
	}
}
