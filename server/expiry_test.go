package server

import (
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fencedio/fenced/lease"
)

// expiryHarness runs an expirer inside a synctest bubble, where time.Sleep
// moves the fake clock and synctest.Wait lets the run loop settle.
type expiryHarness struct {
	t       *testing.T
	e       *expirer
	expired chan string // "key/id" per expire call
	start   time.Time
}

// runExpirer starts e.run in the bubble; the returned stop ends it and waits
// for it to return, which the bubble requires before it ends.
func runExpirer(t *testing.T) (*expiryHarness, func()) {
	h := &expiryHarness{t: t, expired: make(chan string, 100), start: time.Now()}
	h.e = newExpirer(func(key, id string) {
		// expire is documented to run without the lock held: taking it here
		// would deadlock the bubble otherwise.
		_ = h.e.remaining(key, time.Now())
		h.expired <- key + "/" + id
	})
	done, exited := make(chan struct{}), make(chan struct{})
	go func() { defer close(exited); h.e.run(done) }()
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

func testLease(key, id string, ttl time.Duration) lease.Lease {
	return lease.Lease{Key: key, ID: id, Owner: "o", Token: 7, TTL: ttl}
}

func TestExpirer(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func(h *expiryHarness)
	}{
		{"expires at the deadline, not before", func(h *expiryHarness) {
			h.e.add(testLease("k", "id1", 10*time.Second), time.Now())
			h.sleepUntil(4 * time.Second)
			if got := h.e.remaining("k", time.Now()); got != 6*time.Second {
				h.t.Fatalf("remaining at 4s = %v, want 6s", got)
			}
			h.sleepUntil(10*time.Second - time.Nanosecond)
			h.expect()
			h.sleepUntil(10 * time.Second)
			h.expect("k/id1")
			if got := h.e.remaining("k", time.Now()); got != 0 {
				h.t.Fatalf("remaining after expiry = %v", got)
			}
			// Once expired, the lease cannot be renewed back to life.
			if _, err := h.e.renew("k", "id1", time.Now()); !errors.Is(err, lease.ErrNotHeld) {
				h.t.Fatalf("renew after expiry: %v, want ErrNotHeld", err)
			}
			h.sleepUntil(time.Hour)
			h.expect()
		}},
		{"renew postpones by a full TTL", func(h *expiryHarness) {
			l := testLease("k", "id1", 10*time.Second)
			h.e.add(l, time.Now())
			h.sleepUntil(6 * time.Second)
			got, err := h.e.renew("k", "id1", time.Now())
			if err != nil || got != l {
				h.t.Fatalf("renew = %+v, %v, want %+v", got, err, l)
			}
			h.sleepUntil(16*time.Second - time.Nanosecond)
			h.expect()
			h.sleepUntil(16 * time.Second)
			h.expect("k/id1")
		}},
		{"renew with a wrong id changes nothing", func(h *expiryHarness) {
			h.e.add(testLease("k", "id1", 10*time.Second), time.Now())
			h.sleepUntil(6 * time.Second)
			for _, tc := range []struct{ key, id string }{{"k", "id2"}, {"other", "id1"}, {"k", ""}} {
				if _, err := h.e.renew(tc.key, tc.id, time.Now()); !errors.Is(err, lease.ErrNotHeld) {
					h.t.Fatalf("renew(%q, %q): %v, want ErrNotHeld", tc.key, tc.id, err)
				}
			}
			h.sleepUntil(10 * time.Second)
			h.expect("k/id1")
		}},
		{"remove stops expiry", func(h *expiryHarness) {
			h.e.add(testLease("a", "id1", 10*time.Second), time.Now())
			h.e.add(testLease("b", "id2", 10*time.Second), time.Now())
			h.sleepUntil(5 * time.Second)
			h.e.remove("a", "id1")
			h.e.remove("b", "not-b") // another epoch's id leaves b alone
			h.sleepUntil(10 * time.Second)
			h.expect("b/id2")
			h.sleepUntil(time.Hour)
			h.expect()
			if _, err := h.e.renew("a", "id1", time.Now()); !errors.Is(err, lease.ErrNotHeld) {
				h.t.Fatalf("renew of a removed lease: %v, want ErrNotHeld", err)
			}
		}},
		{"leases expire in deadline order", func(h *expiryHarness) {
			h.e.add(testLease("c", "3", 3*time.Second), time.Now())
			h.e.add(testLease("a", "1", 1*time.Second), time.Now())
			h.e.add(testLease("b", "2", 2*time.Second), time.Now())
			h.e.add(testLease("a2", "1b", 1*time.Second), time.Now())
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
		{"a new grant of a key replaces the old one", func(h *expiryHarness) {
			h.e.add(testLease("k", "old", 2*time.Second), time.Now())
			h.sleepUntil(time.Second)
			h.e.add(testLease("k", "new", 10*time.Second), time.Now())
			if _, err := h.e.renew("k", "old", time.Now()); !errors.Is(err, lease.ErrNotHeld) {
				h.t.Fatalf("renew of the replaced lease: %v", err)
			}
			h.sleepUntil(10 * time.Second)
			h.expect()
			h.sleepUntil(11 * time.Second)
			h.expect("k/new")
		}},
		{"reset gives every lease a full TTL from now", func(h *expiryHarness) {
			a, b := testLease("a", "1", 10*time.Second), testLease("b", "2", 3*time.Second)
			h.e.add(a, time.Now())
			h.e.add(testLease("gone", "3", 6*time.Second), time.Now())
			h.sleepUntil(5 * time.Second)
			// A new leader does not know when leases were last renewed.
			h.e.reset([]lease.Lease{a, b}, time.Now())
			if got := h.e.remaining("a", time.Now()); got != 10*time.Second {
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
		{"renewals still move deadlines while inactive", func(h *expiryHarness) {
			h.e.add(testLease("k", "id", 10*time.Second), time.Now())
			h.e.setActive(false)
			h.sleepUntil(8 * time.Second)
			if _, err := h.e.renew("k", "id", time.Now()); err != nil {
				h.t.Fatal(err)
			}
			h.e.setActive(true)
			h.sleepUntil(18*time.Second - time.Nanosecond)
			h.expect()
			h.sleepUntil(18 * time.Second)
			h.expect("k/id")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h, stop := runExpirer(t)
				defer stop()
				h.e.setActive(true)
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
		h.e.add(testLease("a", "1", time.Second), time.Now())
		h.e.add(testLease("b", "2", 30*time.Second), time.Now())
		h.sleepUntil(10 * time.Second)
		h.expect()

		h.e.setActive(true)
		synctest.Wait()
		h.expect("a/1") // overdue: expired at once, at 10s
		if time.Since(h.start) != 10*time.Second {
			t.Fatalf("activation moved the clock to %v", time.Since(h.start))
		}
		h.sleepUntil(20 * time.Second)
		h.e.setActive(false)
		h.sleepUntil(time.Hour)
		h.expect() // b passed its deadline while inactive
		h.e.setActive(true)
		synctest.Wait()
		h.expect("b/2")
	})
}
