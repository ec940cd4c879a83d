package sharegate

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// A fan-out job keeps its slot to itself for at most hold: a send blocked
// on a subscriber that does not read does not stall the others longer.
func TestShareGateHold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := New(1, 0.5, 20*time.Millisecond, func() bool { return true })
		start := time.Now()
		stuck, err := g.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		next, err := g.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		// 20ms held, then rests as long again (share 0.5).
		if got, want := time.Since(start), 40*time.Millisecond; got != want {
			t.Errorf("next job began %v after a stuck one, want %v", got, want)
		}
		stuck() // late: the slot is no longer its own
		if len(g.slots) != 0 {
			t.Error("a late release gave back a slot held by another job")
		}
		next()
		if len(g.slots) != 1 {
			t.Error("slot not given back")
		}
	})
}

// While writes wait, a slot whose read took d rests d*(1-share)/share
// before its next read; with no write waiting it serves at once.
func TestReadGateRestsWhileWritesWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		writes := true
		g := New(1, 0.25, 0, func() bool { return writes })
		release, err := g.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(30 * time.Millisecond) // the read
		release()
		start := time.Now()
		release, err = g.Acquire(context.Background())
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
		release, err = g.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		release()
		if got := time.Since(start); got != 0 {
			t.Errorf("read with no write waiting started after %v, want at once", got)
		}
		// A reader that leaves while its slot rests gives the slot back.
		writes = true
		release, _ = g.Acquire(context.Background())
		time.Sleep(30 * time.Millisecond)
		release()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { _, err := g.Acquire(ctx); done <- err }()
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
