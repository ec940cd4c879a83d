package expiry

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fencedio/fenced/lease"
)

// expiryHarness runs an expirer inside a synctest bubble, where time.Sleep
// moves the fake clock and synctest.Wait lets the run loop settle.
type expiryHarness struct {
	t       *testing.T
	e       *Expirer
	expired chan string // "key/id" per expire call
	start   time.Time
	// cur is the state's record of each key's current lease, as the node
	// finds it when a renewal comes in.
	cur map[string]*lease.Held
}

// add tracks l as the current lease of its key.
func (h *expiryHarness) add(l *lease.Held, now time.Time) *lease.Held {
	h.cur[l.Key] = l
	h.e.Add(l, now)
	return l
}

// reset replaces the current leases and the tracked set with held.
func (h *expiryHarness) reset(held ...*lease.Held) {
	clear(h.cur)
	for _, l := range held {
		h.cur[l.Key] = l
	}
	h.e.Reset(held, time.Now())
}

// runExpirer starts e.Run in the bubble; the returned stop ends it and waits
// for it to return, which the bubble requires before it ends.
func runExpirer(t *testing.T) (*expiryHarness, func()) {
	h := &expiryHarness{t: t, expired: make(chan string, 100), start: time.Now(), cur: map[string]*lease.Held{}}
	h.e = New(func(term uint64, due []lease.Lease) {
		for _, l := range due {
			// expire is documented to run without the lock held: taking it
			// here would deadlock the bubble otherwise.
			_ = h.e.Remaining(nil, time.Now())
			h.expired <- l.Key + "/" + l.ID
		}
	})
	done, exited := make(chan struct{}), make(chan struct{})
	go func() { defer close(exited); h.e.Run(done) }()
	return h, func() { close(done); <-exited }
}

// sleepUntil advances the fake clock to start+at and lets run settle.
func (h *expiryHarness) sleepUntil(at time.Duration) {
	time.Sleep(time.Until(h.start.Add(at)))
	synctest.Wait()
}

// expect checks the expire calls made since the last check, in order.
func (h *expiryHarness) expect(want ...string) {
	h.t.Helper()
	var got []string
	for {
		select {
		case s := <-h.expired:
			got = append(got, s)
			continue
		default:
		}
		break
	}
	if !slices.Equal(got, want) {
		h.t.Fatalf("at +%v expired %q, want %q", time.Since(h.start), got, want)
	}
}

func testLease(key, id string, ttl time.Duration) *lease.Held {
	return &lease.Held{Lease: lease.Lease{Key: key, ID: id, Owner: "o", Token: 7, TTL: ttl}}
}

func TestExpirer(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func(h *expiryHarness)
	}{
		{"expires at the deadline, not before", func(h *expiryHarness) {
			h.add(testLease("k", "id1", 10*time.Second), time.Now())
			h.sleepUntil(4 * time.Second)
			if got := h.e.Remaining(h.cur["k"], time.Now()); got != 6*time.Second {
				h.t.Fatalf("remaining at 4s = %v, want 6s", got)
			}
			h.sleepUntil(10*time.Second - time.Nanosecond)
			h.expect()
			h.sleepUntil(10 * time.Second)
			h.expect("k/id1")
			if got := h.e.Remaining(h.cur["k"], time.Now()); got != 0 {
				h.t.Fatalf("remaining after expiry = %v", got)
			}
			// Once expired, the lease cannot be renewed back to life.
			if _, err := h.e.Renew(h.cur["k"], "id1", time.Now(), 1); !errors.Is(err, lease.ErrNotHeld) {
				h.t.Fatalf("renew after expiry: %v, want ErrNotHeld", err)
			}
			h.sleepUntil(time.Hour)
			h.expect()
		}},
		{"renew postpones by a full TTL", func(h *expiryHarness) {
			l := testLease("k", "id1", 10*time.Second)
			h.add(l, time.Now())
			h.sleepUntil(6 * time.Second)
			got, err := h.e.Renew(h.cur["k"], "id1", time.Now(), 1)
			if err != nil || got != l.Lease {
				h.t.Fatalf("renew = %+v, %v, want %+v", got, err, l)
			}
			h.sleepUntil(16*time.Second - time.Nanosecond)
			h.expect()
			h.sleepUntil(16 * time.Second)
			h.expect("k/id1")
		}},
		{"renew with a wrong id changes nothing", func(h *expiryHarness) {
			h.add(testLease("k", "id1", 10*time.Second), time.Now())
			h.sleepUntil(6 * time.Second)
			for _, tc := range []struct{ key, id string }{{"k", "id2"}, {"other", "id1"}, {"k", ""}} {
				if _, err := h.e.Renew(h.cur[tc.key], tc.id, time.Now(), 1); !errors.Is(err, lease.ErrNotHeld) {
					h.t.Fatalf("renew(%q, %q): %v, want ErrNotHeld", tc.key, tc.id, err)
				}
			}
			h.sleepUntil(10 * time.Second)
			h.expect("k/id1")
		}},
		{"remove stops expiry", func(h *expiryHarness) {
			h.add(testLease("a", "id1", 10*time.Second), time.Now())
			h.add(testLease("b", "id2", 10*time.Second), time.Now())
			h.sleepUntil(5 * time.Second)
			h.e.Remove(h.cur["a"])
			h.e.Remove(testLease("b", "not-b", 10*time.Second)) // another epoch's record leaves b alone
			h.sleepUntil(10 * time.Second)
			h.expect("b/id2")
			h.sleepUntil(time.Hour)
			h.expect()
			if _, err := h.e.Renew(h.cur["a"], "id1", time.Now(), 1); !errors.Is(err, lease.ErrNotHeld) {
				h.t.Fatalf("renew of a removed lease: %v, want ErrNotHeld", err)
			}
		}},
		{"a record tracked elsewhere is neither renewed nor removed here", func(h *expiryHarness) {
			h.add(testLease("k", "id", 10*time.Second), time.Now())
			// A record of another expirer (or of a state that Reset
			// replaced) may carry the slot k has here.
			other := testLease("x", "id", 10*time.Second)
			New(func(uint64, []lease.Lease) {}).Add(other, time.Now())
			if other.Slot != h.cur["k"].Slot {
				h.t.Fatalf("slots %d and %d, want the same", other.Slot, h.cur["k"].Slot)
			}
			h.e.Remove(other)
			if _, err := h.e.Renew(other, "id", time.Now(), 1); !errors.Is(err, lease.ErrNotHeld) {
				h.t.Fatalf("renew of another expirer's record: %v, want ErrNotHeld", err)
			}
			if got := h.e.Remaining(other, time.Now()); got != 0 {
				h.t.Fatalf("remaining of another expirer's record = %v, want 0", got)
			}
			h.sleepUntil(10 * time.Second)
			h.expect("k/id")
		}},
		{"leases expire in deadline order", func(h *expiryHarness) {
			h.add(testLease("c", "3", 3*time.Second), time.Now())
			h.add(testLease("a", "1", 1*time.Second), time.Now())
			h.add(testLease("b", "2", 2*time.Second), time.Now())
			h.add(testLease("a2", "1b", 1*time.Second), time.Now())
			h.sleepUntil(1 * time.Second)
			got := []string{<-h.expired, <-h.expired}
			slices.Sort(got)
			if !slices.Equal(got, []string{"a/1", "a2/1b"}) {
				h.t.Fatalf("at 1s expired %q", got)
			}
			h.expect()
			h.sleepUntil(2 * time.Second)
			h.expect("b/2")
			h.sleepUntil(3 * time.Second)
			h.expect("c/3")
		}},
		{"an ended lease is not renewed once its key is granted again", func(h *expiryHarness) {
			old := h.add(testLease("k", "old", 2*time.Second), time.Now())
			h.sleepUntil(time.Second)
			h.e.Remove(old)
			h.add(testLease("k", "new", 10*time.Second), time.Now())
			for _, l := range []*lease.Held{old, h.cur["k"]} {
				if _, err := h.e.Renew(l, "old", time.Now(), 1); !errors.Is(err, lease.ErrNotHeld) {
					h.t.Fatalf("renew of the ended lease with record %+v: %v", l.Lease, err)
				}
			}
			h.sleepUntil(10 * time.Second)
			h.expect()
			h.sleepUntil(11 * time.Second)
			h.expect("k/new")
		}},
		{"reset gives every lease a full TTL from now", func(h *expiryHarness) {
			a, b := testLease("a", "1", 10*time.Second), testLease("b", "2", 3*time.Second)
			h.add(a, time.Now())
			h.add(testLease("gone", "3", 6*time.Second), time.Now())
			h.sleepUntil(5 * time.Second)
			// A new leader does not know when leases were last renewed.
			h.reset(a, b)
			if got := h.e.Remaining(h.cur["a"], time.Now()); got != 10*time.Second {
				h.t.Fatalf("remaining after reset = %v, want the full 10s", got)
			}
			h.sleepUntil(8*time.Second - time.Nanosecond)
			h.expect()
			h.sleepUntil(8 * time.Second)
			h.expect("b/2")
			h.sleepUntil(15*time.Second - time.Nanosecond)
			h.expect() // a would have expired at 10s without the reset; "gone" at 6s
			h.sleepUntil(15 * time.Second)
			h.expect("a/1")
			h.sleepUntil(time.Hour)
			h.expect()
		}},
		{"a late renewal never moves the deadline back", func(h *expiryHarness) {
			h.add(testLease("k", "id", 10*time.Second), time.Now())
			// A renewal starts at 1s, then stalls (its goroutine starved, a
			// stream renewal stuck) while another starts at 5s and lands.
			early := time.Now().Add(time.Second)
			h.sleepUntil(5 * time.Second)
			if _, err := h.e.Renew(h.cur["k"], "id", time.Now(), 1); err != nil {
				h.t.Fatal(err)
			}
			if _, err := h.e.Renew(h.cur["k"], "id", early, 1); err != nil {
				h.t.Fatal(err)
			}
			if got := h.e.Remaining(h.cur["k"], time.Now()); got != 10*time.Second {
				h.t.Fatalf("remaining after the late renewal = %v, want the later one's 10s", got)
			}
			h.sleepUntil(15*time.Second - time.Nanosecond)
			h.expect()
			h.sleepUntil(15 * time.Second)
			h.expect("k/id")
		}},
		{"a renewal accepted in an earlier term changes nothing", func(h *expiryHarness) {
			h.add(testLease("k", "id", 10*time.Second), time.Now())
			h.sleepUntil(2 * time.Second)
			h.e.Deactivate()
			h.reset(testLease("k", "id", 10*time.Second))
			h.e.Activate(3)
			h.sleepUntil(4 * time.Second)
			if _, err := h.e.Renew(h.cur["k"], "id", time.Now(), 1); !errors.Is(err, ErrOtherTerm) {
				h.t.Fatalf("renewal of term 1 in term 3: %v, want ErrOtherTerm", err)
			}
			h.sleepUntil(12*time.Second - time.Nanosecond)
			h.expect()
			h.sleepUntil(12 * time.Second)
			h.expect("k/id")
		}},
		{"renewals still move deadlines while inactive", func(h *expiryHarness) {
			h.add(testLease("k", "id", 10*time.Second), time.Now())
			h.e.Deactivate()
			h.sleepUntil(8 * time.Second)
			if _, err := h.e.Renew(h.cur["k"], "id", time.Now(), 1); err != nil {
				h.t.Fatal(err)
			}
			h.e.Activate(1)
			h.sleepUntil(18*time.Second - time.Nanosecond)
			h.expect()
			h.sleepUntil(18 * time.Second)
			h.expect("k/id")
		}},
		{"a grant due after the armed timer does not wake the loop, and still expires", func(h *expiryHarness) {
			h.add(testLease("k", "id1", 10*time.Second), time.Now())
			synctest.Wait() // the loop arms its timer for +10s
			h.e.Remove(h.cur["k"])
			h.sleepUntil(time.Second)
			h.add(testLease("k", "id2", 10*time.Second), time.Now())
			synctest.Wait()
			h.e.mu.Lock()
			next := h.e.nextLook
			h.e.mu.Unlock()
			// Woken, the loop would have re-armed for id2's deadline (+11s).
			if want := mono(h.start.Add(10 * time.Second)); next != want {
				h.t.Fatalf("next look at %v, want the timer armed before the grant (%v)", time.Duration(next-mono(h.start)), 10*time.Second)
			}
			h.sleepUntil(11*time.Second - time.Nanosecond)
			h.expect()
			h.sleepUntil(11 * time.Second)
			h.expect("k/id2")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h, stop := runExpirer(t)
				defer stop()
				h.e.Activate(1)
				tc.run(h)
			})
		})
	}
}

func TestExpirerInactive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, stop := runExpirer(t)
		defer stop()
		// A new expirer is inactive: only the leader acts on deadlines.
		h.add(testLease("a", "1", time.Second), time.Now())
		h.add(testLease("b", "2", 30*time.Second), time.Now())
		h.sleepUntil(10 * time.Second)
		h.expect()

		h.e.Activate(1)
		synctest.Wait()
		h.expect("a/1") // overdue: expired at once, at 10s
		if time.Since(h.start) != 10*time.Second {
			t.Fatalf("activation moved the clock to %v", time.Since(h.start))
		}
		h.sleepUntil(20 * time.Second)
		h.e.Deactivate()
		h.sleepUntil(time.Hour)
		h.expect() // b passed its deadline while inactive
		h.e.Activate(1)
		synctest.Wait()
		h.expect("b/2")
	})
}

// A clock set by SetClock replaces the wall clock for every deadline, and
// Wake has the loop look at it after it moved.
func TestExpirerSetClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, stop := runExpirer(t)
		defer stop()
		var mu sync.Mutex
		now := h.start
		h.e.SetClock(func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
		h.e.Activate(5)
		if got := h.e.Term(); got != 5 {
			t.Fatalf("Term() = %d after Activate(5)", got)
		}
		h.add(testLease("k", "id", 10*time.Second), h.e.Now())
		h.sleepUntil(time.Hour) // the wall clock moves, the set one does not
		h.expect()
		if got := h.e.Remaining(h.cur["k"], h.e.Now()); got != 10*time.Second {
			t.Fatalf("remaining on the set clock = %v, want 10s", got)
		}
		mu.Lock()
		now = now.Add(10 * time.Second)
		mu.Unlock()
		h.e.Wake()
		synctest.Wait()
		h.expect("k/id")
	})
}

// Leases that come due together are expired in batches, by a bounded number
// of submissions at once, each stamped with the term that decided it; the
// rest wait for a free slot and cannot be renewed meanwhile.
func TestExpirerBatchesAndBounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		type call struct {
			term uint64
			due  []lease.Lease
			done chan struct{}
		}
		calls := make(chan call, 100)
		var e *Expirer
		e = New(func(term uint64, due []lease.Lease) {
			c := call{term, due, make(chan struct{})}
			calls <- c
			<-c.done
		})
		e.maxBatch, e.maxInflight = 3, 2
		done, exited := make(chan struct{}), make(chan struct{})
		go func() { defer close(exited); e.Run(done) }()
		defer func() { close(done); <-exited }()

		var all []*lease.Held
		for i := range 10 {
			l := testLease(fmt.Sprintf("k%d", i), fmt.Sprintf("id%d", i), 5*time.Second)
			all = append(all, l)
		}
		e.Reset(all, time.Now()) // a restart: one deadline for all
		e.Activate(7)
		time.Sleep(5 * time.Second)
		synctest.Wait()
		take := func() []call {
			var got []call
			for {
				select {
				case c := <-calls:
					got = append(got, c)
					continue
				default:
				}
				return got
			}
		}
		running := take()
		if len(running) != 2 || len(running[0].due) != 3 || len(running[1].due) != 3 {
			t.Fatalf("%d submissions running, want 2 of 3 leases", len(running))
		}
		for _, c := range running {
			if c.term != 7 {
				t.Fatalf("expiry stamped with term %d, want 7", c.term)
			}
		}
		// The four left are past their deadline: renewing one fails.
		var expired []string
		seen := map[string]bool{}
		for _, c := range running {
			for _, l := range c.due {
				seen[l.Key] = true
			}
		}
		for _, l := range all {
			if seen[l.Key] {
				continue
			}
			if _, err := e.Renew(l, l.ID, time.Now(), 7); !errors.Is(err, lease.ErrNotHeld) {
				t.Fatalf("renew of %s, due and waiting for a slot: %v, want ErrNotHeld", l.Key, err)
			}
		}
		// A finished submission frees a slot for the next batch.
		close(running[0].done)
		synctest.Wait()
		next := take()
		if len(next) != 1 || len(next[0].due) != 3 {
			t.Fatalf("after one submission ended: %d new, want one of 3 leases", len(next))
		}
		close(running[1].done)
		close(next[0].done)
		synctest.Wait()
		last := take()
		if len(last) != 1 || len(last[0].due) != 1 {
			t.Fatalf("the last submissions: %d, want one of 1 lease", len(last))
		}
		close(last[0].done)
		synctest.Wait()
		for _, c := range append(append(running, next...), last...) {
			for _, l := range c.due {
				expired = append(expired, l.Key)
			}
		}
		slices.Sort(expired)
		want := make([]string, 0, len(all))
		for _, l := range all {
			want = append(want, l.Key)
		}
		slices.Sort(want)
		if !slices.Equal(expired, want) {
			t.Fatalf("expired %q, want each of %q once", expired, want)
		}
		if got := take(); len(got) != 0 {
			t.Fatalf("%d more submissions with nothing due", len(got))
		}
	})
}

// BenchmarkExpirerCycle tracks, renews and forgets a lease beside 100,000
// tracked ones: what the leader's deadlines add to an acquire, a renewal
// and a release.
func BenchmarkExpirerCycle(b *testing.B) {
	e := New(func(uint64, []lease.Lease) {})
	now := time.Now()
	for i := range 100_000 {
		e.Add(testLease(fmt.Sprintf("live/%08d", i), fmt.Sprint(i), time.Hour), now)
	}
	ls := make([]*lease.Held, 1024)
	for i := range ls {
		ls[i] = testLease(fmt.Sprintf("bench/%d", i), fmt.Sprint(i), time.Minute)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		l := ls[i%len(ls)]
		e.Add(l, now)
		if _, err := e.Renew(l, l.ID, now, e.Term()); err != nil {
			b.Fatal(err)
		}
		e.Remove(l)
	}
}
