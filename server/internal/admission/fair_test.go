package admission

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// enterAsync enters g for group in a goroutine; the channel yields its place.
func enterAsync(ctx context.Context, g *FairGate, group string) <-chan *Place {
	ch := make(chan *Place, 1)
	go func() {
		p, _ := g.Enter(ctx, group)
		ch <- p
	}()
	return ch
}

// waitWaiting returns once every goroutine of the bubble is blocked, and
// checks that n calls then wait at g.
func waitWaiting(t *testing.T, g *FairGate, n int) {
	t.Helper()
	synctest.Wait()
	if _, w := g.Running(); w != n {
		t.Fatalf("%d calls wait, want %d", w, n)
	}
}

func mustEnter(t *testing.T, g *FairGate, group string) *Place {
	t.Helper()
	p, err := g.Enter(context.Background(), group)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// At most capacity calls hold places; a place given back (once, however
// often Leave is called) lets one waiting call in.
func TestFairGateCapacity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := NewFairGate(2, nil)
		a1, a2 := mustEnter(t, g, "a"), mustEnter(t, g, "a")
		third := enterAsync(context.Background(), g, "b")
		waitWaiting(t, g, 1)
		if r, w := g.Running(); r != 2 || w != 1 {
			t.Fatalf("running %d, waiting %d; want 2, 1", r, w)
		}
		a1.Leave()
		a1.Leave()
		b := <-third
		if r, w := g.Running(); r != 2 || w != 0 {
			t.Fatalf("after one place given back twice: running %d, waiting %d; want 2, 0", r, w)
		}
		a2.Leave()
		b.Leave()
		if r, w := g.Running(); r != 0 || w != 0 {
			t.Fatalf("all left: running %d, waiting %d", r, w)
		}
		(*Place)(nil).Leave()
		new(Place).Leave()
	})
}

func TestFairGateServesTheLightGroupFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := NewFairGate(1, nil)
		held := mustEnter(t, g, "flood")
		var flood []<-chan *Place
		for i := range 20 {
			flood = append(flood, enterAsync(context.Background(), g, "flood"))
			waitWaiting(t, g, i+1)
		}
		time.Sleep(10 * time.Millisecond)
		held.Leave() // the flood's first waiter gets the place: it asked first
		next := <-flood[0]
		good := enterAsync(context.Background(), g, "good")
		waitWaiting(t, g, 20)
		time.Sleep(10 * time.Millisecond)
		next.Leave()
		select {
		case p := <-good:
			p.Leave()
		case <-time.After(5 * time.Second):
			t.Fatal("the good group's one call was not given the free place ahead of the flood's 19")
		}
		for _, ch := range flood[1:] {
			(<-ch).Leave()
		}
	})
}

func TestFairGateChargesTimeHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := NewFairGate(1, nil)
		cost := map[string]time.Duration{"heavy": 30 * time.Millisecond, "light": 10 * time.Millisecond}
		served := map[string]int{}
		p := mustEnter(t, g, "heavy")
		group := "heavy"
		ctx, cancel := context.WithCancel(context.Background())
		waiting := map[string]<-chan *Place{
			"heavy": enterAsync(ctx, g, "heavy"),
			"light": enterAsync(ctx, g, "light"),
		}
		waitWaiting(t, g, 2)
		for range 400 {
			time.Sleep(cost[group])
			p.Leave()
			// Exactly one of the two waiting gets the place.
			var got string
			select {
			case p = <-waiting["heavy"]:
				got = "heavy"
			case p = <-waiting["light"]:
				got = "light"
			case <-time.After(5 * time.Second):
				t.Fatal("no waiting call got the free place")
			}
			served[got]++
			group = got
			waiting[got] = enterAsync(ctx, g, got)
			waitWaiting(t, g, 2)
		}
		p.Leave()
		cancel()
		(<-waiting["heavy"]).Leave() // nil when its wait was cancelled
		(<-waiting["light"]).Leave()
		ratio := float64(served["light"]) / float64(served["heavy"])
		if ratio < 2.7 || ratio > 3.3 {
			t.Errorf("served %v: light/heavy %.2f, want about 3", served, ratio)
		}
	})
}

func TestFairGateWaitEndsWithContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := NewFairGate(1, nil)
		held := mustEnter(t, g, "a")
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			p, err := g.Enter(ctx, "b")
			if p != nil {
				err = errors.New("got a place")
			}
			errc <- err
		}()
		waitWaiting(t, g, 1)
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("a wait whose context ended: %v, want context.Canceled", err)
		}
		if r, w := g.Running(); r != 1 || w != 0 {
			t.Fatalf("running %d, waiting %d; want 1, 0", r, w)
		}
		held.Leave()
		if r, _ := g.Running(); r != 0 {
			t.Fatalf("running %d after the only place was given back", r)
		}
		if len(g.groups) != 0 {
			t.Fatalf("groups kept after all left: %v", g.groups)
		}
	})
}
