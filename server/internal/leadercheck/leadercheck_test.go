package leadercheck

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// roundStart is the "error" a test round answers with: when it started.
type roundStart time.Time

func (roundStart) Error() string { return "round" }

// Every caller's answer comes from a round that started after it called,
// and concurrent callers share rounds.
func TestLeaderCheckCoalesces(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var rounds atomic.Int64
		c := &Check{Verify: func() error {
			rounds.Add(1)
			start := time.Now()
			time.Sleep(10 * time.Millisecond) // one heartbeat round
			return roundStart(start)
		}}
		var wg sync.WaitGroup
		for i := 0; i < 50; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(time.Duration(i) * time.Millisecond)
				called := time.Now()
				var start roundStart
				if err := c.Confirm(context.Background()); !errors.As(err, &start) {
					t.Errorf("confirm = %v", err)
					return
				}
				if time.Time(start).Before(called) {
					t.Errorf("caller at %v answered by a round that started at %v", called, time.Time(start))
				}
			}()
		}
		wg.Wait()
		if n := rounds.Load(); n < 2 || n > 10 {
			t.Fatalf("%d rounds for 50 callers over 50ms of 10ms rounds; want them shared", n)
		}
	})
}

func TestLeaderCheckReportsErrors(t *testing.T) {
	lost := errors.New("leadership lost")
	c := &Check{Verify: func() error { return lost }}
	if err := c.Confirm(context.Background()); !errors.Is(err, lost) {
		t.Fatalf("confirm = %v, want %v", err, lost)
	}
}

// A caller whose context ends during a round is answered with its
// context's error at once; the round goes on for the others.
func TestLeaderCheckHonoursContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &Check{Verify: func() error { time.Sleep(time.Second); return nil }}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel()
		other := make(chan error, 1)
		go func() { other <- c.Confirm(context.Background()) }()
		start := time.Now()
		if err := c.Confirm(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("confirm with a 10ms deadline = %v, want deadline exceeded", err)
		}
		if waited := time.Since(start); waited != 10*time.Millisecond {
			t.Errorf("confirm returned after %v, want at its 10ms deadline", waited)
		}
		if err := <-other; err != nil {
			t.Fatalf("the other caller: %v", err)
		}
		// A round that started for the caller that left runs to its end.
		time.Sleep(2 * time.Second)
		synctest.Wait()
	})
}

// A sole leader is confirmed without a round; otherwise confirm runs one.
func TestLeaderCheckSoleVoter(t *testing.T) {
	var rounds atomic.Int64
	sole := true
	c := &Check{
		Verify: func() error { rounds.Add(1); return nil },
		Sole:   func() bool { return sole },
	}
	if err := c.Confirm(context.Background()); err != nil || rounds.Load() != 0 {
		t.Fatalf("sole voter: confirm = %v after %d rounds, want nil after none", err, rounds.Load())
	}
	sole = false
	if err := c.Confirm(context.Background()); err != nil || rounds.Load() != 1 {
		t.Fatalf("one of several voters: confirm = %v after %d rounds, want nil after one", err, rounds.Load())
	}
}
