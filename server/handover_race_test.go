package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/fencedio/fenced/internal/testenv"
	"github.com/fencedio/fenced/lease"
)

// newTestServer starts a single node on loopback ports chosen by the system
// and a fresh data directory, waits until it serves, and closes it when the
// test ends. cfg's zero fields get test defaults.
func newTestServer(t testing.TB, cfg Config) *Server {
	t.Helper()
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	setDefault(&cfg.Listen, "127.0.0.1:0")
	setDefault(&cfg.RaftListen, "127.0.0.1:0")
	setDefault(&cfg.MinTTL, 100*time.Millisecond)
	setDefault(&cfg.HeartbeatTimeout, 100*time.Millisecond)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return s
}

// A waiter whose wait runs out while the key is being handed to it gets the
// grant: it never reports its own lease as someone else's hold, and the
// grant is never left to expire unknown. The holder's release, or its
// expiry, is timed to land within a few milliseconds of the end of the
// wait, hundreds of times.
func TestWaitEndingDuringHandover(t *testing.T) {
	if testing.Short() {
		t.Skip("races hundreds of handovers against wait deadlines")
	}
	testenv.SkipUnlessLong(t)
	s := newTestServer(t, Config{})
	const holderTTL = 100 * time.Millisecond // expiry: A's lease, never renewed
	for _, ending := range []string{"release", "expiry"} {
		t.Run(ending, func(t *testing.T) {
			ctx := context.Background()
			var granted, refused, selfHeld, lost int
			deadline := time.Now().Add(12 * time.Second)
			n := 0
			for ; n < 300 && time.Now().Before(deadline); n++ {
				key := fmt.Sprintf("race/%s/%d", ending, n)
				ttl := time.Minute
				if ending == "expiry" {
					ttl = holderTTL
				}
				a, err := s.Acquire(ctx, key, "A", ttl, 0)
				if err != nil {
					t.Fatal(err)
				}
				acquired := time.Now()
				// The holder's lease ends from 3ms before to 3ms after B's
				// wait does.
				offset := time.Duration(n%13-6) * time.Millisecond / 2
				waitMs := int64(20)
				if ending == "expiry" {
					waitMs = (time.Until(acquired.Add(holderTTL)) - offset).Milliseconds()
				}
				type outcome struct {
					l   lease.Lease
					err error
				}
				got := make(chan outcome, 1)
				start := time.Now()
				go func() {
					l, err := s.Acquire(ctx, key, "B", time.Minute, time.Duration(waitMs)*time.Millisecond)
					got <- outcome{l, err}
				}()
				if ending == "release" {
					time.Sleep(time.Until(start.Add(time.Duration(waitMs)*time.Millisecond + offset)))
					if err := s.Release(ctx, key, a.ID); err != nil {
						t.Fatalf("release A: %v", err)
					}
				}
				r := <-got
				var cur lease.Lease
				var held bool
				s.fsm.Read(func(st *lease.State) { cur, held = st.Get(key) })
				var he *lease.HeldError
				switch {
				case r.err == nil:
					granted++
					if !held || cur.ID != r.l.ID || r.l.Owner != "B" {
						t.Errorf("trial %d: B was granted %+v but the key is held by %+v (%v)", n, r.l, cur, held)
					}
					if err := s.Release(ctx, key, r.l.ID); err != nil {
						t.Fatalf("release B: %v", err)
					}
				case errors.As(r.err, &he) && he.Owner == "B":
					selfHeld++
					t.Errorf("trial %d (A's lease ending %v from the wait's end): B told %v", n, offset, r.err)
				case errors.As(r.err, &he):
					refused++
					if held && cur.Owner == "B" {
						lost++
						t.Errorf("trial %d: B was refused (%v) but holds the key as %+v", n, r.err, cur)
					}
				default:
					t.Fatalf("trial %d: B: %v", n, r.err)
				}
			}
			t.Logf("%d trials: %d granted, %d refused, %d told the key is held by itself, %d grants lost", n, granted, refused, selfHeld, lost)
			if n < 50 {
				t.Fatalf("only %d trials in time", n)
			}
		})
	}
}
