package client_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fencedio/fenced/api/fenced/v1/fencedv1connect"
	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/internal/fencedtest"
)

// fakeClient returns a client of fake that runs inside a synctest bubble.
func fakeClient(t *testing.T, fake *fakeService, cfg client.Config) *client.Client {
	t.Helper()
	_, h := fencedv1connect.NewLeaseServiceHandler(fake)
	cfg.Endpoint, cfg.HTTPClient = "http://fenced.test", inProcess{h}
	c, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Close waits for the client's renewals and releases in flight, so a
	// synctest bubble ends with them.
	t.Cleanup(func() { c.Close() })
	return c
}

// A grant that comes more than a TTL after the Acquire was sent (the key was
// held and Acquire waited) must give a live lease: its local deadline
// counts from a renewal sent after the grant, not from the Acquire.
func TestWaitedAcquireLongerThanTTL(t *testing.T) {
	t.Parallel()
	renewPaths(t, func(t *testing.T, unary bool) {
		synctest.Test(t, func(t *testing.T) {
			const ttl = 3 * time.Second
			fake := &fakeService{delay: 200 * time.Millisecond, acquireDelay: 7 * time.Second}
			fake.unary = unary
			c := fakeClient(t, fake, client.Config{TTL: ttl})
			start := time.Now()
			l, err := c.Acquire(context.Background(), "k", client.WithWait(30*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Err(); err != nil {
				t.Fatalf("Acquire returned a lease that had already ended: %v", err)
			}
			renewals := fake.renewedAt()
			if len(renewals) != 1 || !renewals[0].Equal(start.Add(7*time.Second)) {
				t.Fatalf("renewals at %v, want one at once after the grant (%v)", renewals, start.Add(7*time.Second))
			}
			if d := l.Deadline(); d.Sub(renewals[0]) < ttl*9/10 || d.After(renewals[0].Add(ttl)) {
				t.Fatalf("deadline %v after the renewal, want about one TTL (%v)", d.Sub(renewals[0]), ttl)
			}
			// The lease keeps renewing past several TTLs.
			time.Sleep(3 * ttl)
			if err := l.Err(); err != nil {
				t.Fatalf("lease ended %v after the grant: %v", 3*ttl, err)
			}
			if err := l.Release(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
	})
}

// When the renewal after a late grant fails, Acquire returns the error and
// releases the grant in the background.
func TestWaitedAcquireRenewalFails(t *testing.T) {
	t.Parallel()
	renewPaths(t, func(t *testing.T, unary bool) {
		synctest.Test(t, func(t *testing.T) {
			fake := &fakeService{acquireDelay: 7 * time.Second}
			fake.unary = unary
			fake.failFrom = time.Now()
			c := fakeClient(t, fake, client.Config{TTL: 3 * time.Second})
			l, err := c.Acquire(context.Background(), "k", client.WithWait(30*time.Second))
			if !errors.Is(err, client.ErrLost) || !errors.Is(err, client.ErrUnavailable) || l != nil {
				t.Fatalf("Acquire = %v, %v; want an error matching ErrLost and ErrUnavailable", l, err)
			}
			synctest.Wait()
			if got := fake.released(); len(got) != 1 {
				t.Fatalf("releases %v, want one", got)
			}
		})
	})
}

// The same against a real server: TTL 1s, wait 5s, the holder releases
// after 1.5s.
func TestWaitedAcquireLongerThanTTLServer(t *testing.T) {
	t.Parallel()
	renewPaths(t, func(t *testing.T, unary bool) {
		srv := fencedtest.Start(t)
		ctx := context.Background()
		a := renewClient(t, srv, unary, client.Config{TTL: time.Second, Owner: "a"})
		b := renewClient(t, srv, unary, client.Config{TTL: time.Second, Owner: "b"})
		la, err := a.Acquire(ctx, "wait/1")
		if err != nil {
			t.Fatal(err)
		}
		release := time.AfterFunc(1500*time.Millisecond, func() { la.Release(ctx) })
		defer release.Stop()
		lb, err := b.Acquire(ctx, "wait/1", client.WithWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer lb.Release(ctx)
		if err := lb.Err(); err != nil {
			t.Fatalf("Acquire returned a lease that had already ended: %v", err)
		}
		if !la.Deadline().Before(time.Now()) && la.Err() == nil {
			t.Fatal("b acquired while a still held the key")
		}
		// b keeps the lease past its TTL: it renews.
		select {
		case <-lb.Done():
			t.Fatalf("lease lost after the wait: %v", lb.Err())
		case <-time.After(1500 * time.Millisecond):
		}
		got, err := b.Get(ctx, "wait/1")
		if err != nil || got.Lease == nil || got.Lease.Token != lb.Token() {
			t.Fatalf("server shows %+v %v, want b's token %d", got, err, lb.Token())
		}
	})
}

// A RenewInterval the caller configured is honoured by leases with their
// own TTL when it is shorter than TTL/3; the default one is not, since it
// only follows Config.TTL.
func TestWithTTLRenewInterval(t *testing.T) {
	t.Parallel()
	renewPaths(t, func(t *testing.T, unary bool) {
		for _, tc := range []struct {
			name     string
			cfg      client.Config
			ttl      time.Duration
			within   time.Duration
			min, max int
		}{
			{"configured interval below TTL/3", client.Config{TTL: 10 * time.Second, RenewInterval: 100 * time.Millisecond}, 30 * time.Second, time.Second, 10, 11},
			{"default interval follows the lease TTL", client.Config{TTL: 10 * time.Second}, 3 * time.Second, time.Second, 1, 1},
			{"configured interval above TTL/3", client.Config{TTL: 10 * time.Second, RenewInterval: 5 * time.Second}, 3 * time.Second, time.Second, 1, 1},
		} {
			t.Run(tc.name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					fake := &fakeService{}
					fake.unary = unary
					c := fakeClient(t, fake, tc.cfg)
					l, err := c.Acquire(context.Background(), "k", client.WithTTL(tc.ttl))
					if err != nil {
						t.Fatal(err)
					}
					time.Sleep(tc.within)
					synctest.Wait()
					if n := len(fake.renewedAt()); n < tc.min || n > tc.max {
						t.Errorf("%d renewals in %v, want %d to %d", n, tc.within, tc.min, tc.max)
					}
					l.Release(context.Background())
					synctest.Wait()
				})
			})
		}
	})
}

// After MarkLost, the client releases the lease in the background, so the key
// frees long before its TTL runs out.
func TestLostReleasesOnServer(t *testing.T) {
	t.Parallel()
	srv := fencedtest.Start(t)
	c := srv.Client(t, client.Config{TTL: 30 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	events := make(chan client.Event, 16)
	go c.Watch(ctx, "lost/", 0, func(e client.Event) error { events <- e; return nil })
	// The acquisition may come before the watch stream is open, and then
	// the stream never shows it: acquire again until one is seen.
	var l *client.Lease
	for l == nil {
		m, err := c.Acquire(ctx, "lost/1")
		if err != nil {
			t.Fatal(err)
		}
		timeout := time.After(2 * time.Second)
		for l == nil {
			select {
			case e := <-events:
				if e.Type == client.Acquired && e.Lease.Token == m.Token() {
					l = m
				}
			case <-timeout:
				if err := m.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if l == nil && m.Err() != nil {
				break
			}
		}
	}
	l.MarkLost(errors.New("stale"))
	for released := false; !released; {
		select {
		case e := <-events:
			if e.Lease.Token == l.Token() && e.Type != client.Acquired {
				if e.Type != client.Released {
					t.Fatalf("event %+v, want the release of token %d", e, l.Token())
				}
				released = true
			}
		case <-ctx.Done():
			t.Fatal("the key was not released after MarkLost")
		}
	}
	if got, err := c.Get(ctx, "lost/1"); err != nil || got.Lease != nil {
		t.Fatalf("after MarkLost: %+v err=%v, want free", got, err)
	}
}

// A loss by deadline releases in the background too; MarkLost never waits for
// the release, which gives up after RequestTimeout.
func TestLocalLossReleasesInBackground(t *testing.T) {
	t.Parallel()
	renewPaths(t, func(t *testing.T, unary bool) {
		synctest.Test(t, func(t *testing.T) {
			fake := &fakeService{hangRelease: true}
			fake.unary = unary
			c := fakeClient(t, fake, client.Config{TTL: 3 * time.Second, RequestTimeout: time.Second})
			l, err := c.Acquire(context.Background(), "k")
			if err != nil {
				t.Fatal(err)
			}
			before := time.Now()
			l.MarkLost(errors.New("stale"))
			if !time.Now().Equal(before) {
				t.Fatalf("MarkLost blocked for %v", time.Since(before))
			}
			if !errors.Is(l.Err(), client.ErrLost) {
				t.Fatalf("cause %v, want ErrLost", l.Err())
			}
			synctest.Wait()
			if got := fake.released(); len(got) != 1 || got[0] != l.ID() {
				t.Fatalf("releases %v, want one of %s", got, l.ID())
			}
			// Close waits for the release in flight, which gives up after
			// RequestTimeout.
			c.Close()
			if since := time.Since(before); since != time.Second {
				t.Fatalf("Close returned %v after the loss, want RequestTimeout (1s)", since)
			}

			// Renewals that fail until the local deadline passes.
			fake = &fakeService{}
			fake.unary = unary
			c = fakeClient(t, fake, client.Config{TTL: 3 * time.Second})
			l, err = c.Acquire(context.Background(), "k")
			if err != nil {
				t.Fatal(err)
			}
			fake.mu.Lock()
			fake.failFrom = time.Now()
			fake.mu.Unlock()
			<-l.Done()
			synctest.Wait()
			if got := fake.released(); len(got) != 1 || got[0] != l.ID() {
				t.Fatalf("releases after the deadline passed: %v, want one of %s", got, l.ID())
			}
		})
	})
}

// A renewal answered before the local deadline but applied after it (the
// process paused between the answer and its processing, before the
// deadline timer ran) must not move the deadline: the lease is lost, and a
// lost lease never comes back (docs/client-algorithm.md, section 1.2).
// Before the check in Lease.renew, the deadline moved on and the lease
// stayed held.
func TestRenewalAppliedAfterDeadlineLoses(t *testing.T) {
	t.Parallel()
	renewPaths(t, func(t *testing.T, unary bool) {
		synctest.Test(t, func(t *testing.T) {
			const ttl = 3 * time.Second
			fake := &fakeService{}
			fake.unary = unary
			c := fakeClient(t, fake, client.Config{TTL: ttl})
			var paused atomic.Int64 // how far the client's clock jumps
			client.SetClock(c, func() time.Time { return time.Now().Add(time.Duration(paused.Load())) })
			l, err := c.Acquire(context.Background(), "k")
			if err != nil {
				t.Fatal(err)
			}
			before := l.Deadline()
			fake.mu.Lock()
			fake.onRenew = func() { paused.Store(int64(ttl)) } // answered in time, applied a TTL later
			fake.mu.Unlock()
			time.Sleep(ttl / 3)
			synctest.Wait()
			if len(fake.renewedAt()) != 1 {
				t.Fatalf("renewals %v, want one", fake.renewedAt())
			}
			if !errors.Is(l.Err(), client.ErrLost) {
				t.Fatalf("lease cause %v after a renewal applied past the deadline, want ErrLost", l.Err())
			}
			if d := l.Deadline(); !d.Equal(before) {
				t.Fatalf("deadline moved by %v after it had passed", d.Sub(before))
			}
		})
	})
}
