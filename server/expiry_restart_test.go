package server

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/fencedio/fenced/internal/testenv"
	"github.com/fencedio/fenced/lease"
	"github.com/hashicorp/raft"
)

// After a restart every lease gets the same fresh deadline, so all of them
// come due at once. Expiring 100,000 leases whose clients are gone must not
// take a goroutine (or a log entry) per lease.
func TestRestartExpiresManyLeases(t *testing.T) {
	if testing.Short() {
		t.Skip("writes and expires 100,000 leases")
	}
	testenv.SkipUnlessLong(t)
	const (
		n   = 100_000
		ttl = time.Second
		// goroutineBound is how far the goroutine count may rise above the
		// idle server's while everything expires.
		goroutineBound = 32
	)
	cfg := Config{DataDir: t.TempDir()}
	s := newTestServer(t, cfg)
	// The clients never renew; keep these leases until the restart.
	s.expirer.Deactivate()
	start := time.Now()
	writeLeases(t, s, n, ttl)
	t.Logf("wrote %d leases in %v", n, time.Since(start))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = newTestServer(t, cfg)
	ready := time.Now()
	if got := s.leaseCount(); got != n {
		t.Fatalf("%d leases after the restart, want %d", got, n)
	}
	base := runtime.NumGoroutine()
	var (
		mu        sync.Mutex
		peak      = base
		peakHeap  uint64
		stop      = make(chan struct{})
		samplerWG sync.WaitGroup
	)
	samplerWG.Add(1)
	go func() {
		defer samplerWG.Done()
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		var ms runtime.MemStats
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			g := runtime.NumGoroutine()
			mu.Lock()
			peak = max(peak, g)
			mu.Unlock()
			if i%100 == 0 {
				runtime.ReadMemStats(&ms)
				mu.Lock()
				peakHeap = max(peakHeap, ms.HeapInuse)
				mu.Unlock()
			}
		}
	}()
	deadline := ready.Add(3 * time.Minute)
	// Events reach the counters just after the state changes: wait for both.
	for s.leaseCount() > 0 || s.counts.Expired.Load() < n {
		if time.Now().After(deadline) {
			close(stop)
			t.Fatalf("%d of %d leases left %v after the restart", s.leaseCount(), n, time.Since(ready))
		}
		time.Sleep(10 * time.Millisecond)
	}
	took := time.Since(ready)
	close(stop)
	samplerWG.Wait()
	t.Logf("all %d leases expired %v after the restart (%v after their deadline); goroutines %d idle, %d at peak; heap in use at most %d MiB",
		n, took, took-ttl, base, peak, peakHeap>>20)
	if peak-base > goroutineBound {
		t.Errorf("goroutines rose from %d to %d while leases expired, want at most %d more", base, peak, goroutineBound)
	}
	if got := s.counts.Expired.Load(); got != n {
		t.Errorf("%d expirations counted, want %d", got, n)
	}
}

// writeLeases grants n leases with the given TTL straight through raft,
// many entries in flight at once.
func writeLeases(t *testing.T, s *Server, n int, ttl time.Duration) {
	t.Helper()
	pending := make([]raft.ApplyFuture, 0, 2048)
	flush := func() {
		for _, f := range pending {
			if err := f.Error(); err != nil {
				t.Fatal(err)
			}
			if res := f.Response().(lease.Result); res.Err != nil {
				t.Fatal(res.Err)
			}
		}
		pending = pending[:0]
	}
	for i := range n {
		c := lease.Command{Op: lease.OpAcquire, Key: fmt.Sprintf("gone/%06d", i), ID: newLeaseID(), Owner: "gone", TTL: ttl}
		data, err := c.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		pending = append(pending, s.raft.Apply(data, 0))
		if len(pending) == cap(pending) {
			flush()
		}
	}
	flush()
}

func (s *Server) leaseCount() int {
	var n int
	s.fsm.Read(func(st *lease.State) { n = st.Len() })
	return n
}

// An expiry batch applies only in the term that decided it; single expiries
// from logs written before batches apply whatever the term. Replaying the
// log after a restart gives the same state.
func TestExpiryEntriesAndTerms(t *testing.T) {
	cfg := Config{DataDir: t.TempDir()}
	s := newTestServer(t, cfg)
	s.expirer.Deactivate() // only the entries below end leases
	writeLeases(t, s, 4, time.Minute)
	held := func(s *Server, key string) bool {
		var ok bool
		s.fsm.Read(func(st *lease.State) { _, ok = st.Get(key) })
		return ok
	}
	current := func(key string) lease.Lease {
		var l lease.Lease
		s.fsm.Read(func(st *lease.State) { l, _ = st.Get(key) })
		return l
	}
	a, b, c, d := current("gone/000000"), current("gone/000001"), current("gone/000002"), current("gone/000003")
	term := s.raft.CurrentTerm()

	for _, wrong := range []uint64{term - 1, term + 1} {
		res, err := s.applyAlways(context.Background(), lease.Command{Op: lease.OpExpireBatch, Term: wrong, Expiries: []lease.Expiry{{Key: d.Key, ID: d.ID}}})
		if err != nil || !errors.Is(res.Err, lease.ErrWrongTerm) || !held(s, d.Key) {
			t.Fatalf("expiry of term %d in term %d: %+v, %v; held %v", wrong, term, res, err, held(s, d.Key))
		}
	}
	res, err := s.applyAlways(context.Background(), lease.Command{Op: lease.OpExpireBatch, Term: term, Expiries: []lease.Expiry{{Key: a.Key, ID: a.ID}, {Key: b.Key, ID: b.ID}}})
	if err != nil || res.Err != nil || len(res.Items) != 2 || res.Items[1].Event.Type != lease.Expired || held(s, a.Key) || held(s, b.Key) {
		t.Fatalf("expiry in its own term: %+v, %v", res, err)
	}
	res, err = s.applyAlways(context.Background(), lease.Command{Op: lease.OpExpire, Key: c.Key, ID: c.ID})
	if err != nil || res.Event.Type != lease.Expired || held(s, c.Key) {
		t.Fatalf("single expiry: %+v, %v", res, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = newTestServer(t, cfg)
	if n := s.leaseCount(); n != 1 || !held(s, d.Key) {
		t.Fatalf("%d leases after replaying the log, want only %s", n, d.Key)
	}
}
