package fenceredis_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fenceredis"
)

// logScript appends the accepted token to a per-scope list and stores it in
// a data key, in the same script as the check. The list is therefore the
// order in which Redis applied the accepted mutations.
var logScript = fenceredis.NewScript(`
redis.call('RPUSH', KEYS[1], TOKEN)
redis.call('SET', KEYS[2], TOKEN)
return redis.call('LLEN', KEYS[1])
`)

// TestConcurrentInterleavedTokens runs many writers per scope that keep
// acquiring newer tokens (from a per-scope counter standing in for the lease
// service), plus one writer per scope that holds the oldest token and keeps
// writing, like a paused ex-holder. It checks I5 from the outside: Redis's
// own record of accepted tokens never goes down.
func TestConcurrentInterleavedTokens(t *testing.T) {
	const (
		scopes     = 3
		writers    = 6 // per scope, besides the stale one
		opsPerW    = 40
		reacquireP = 0.3
	)
	// Tokens above 2^63 make every comparison depend on the low bits a
	// double would drop.
	const base = uint64(1)<<63 + 12345

	ctx := context.Background()
	c, g, run := setup(t)

	type result struct {
		mu       sync.Mutex
		accepted []uint64
		rejected []fence.StaleTokenError
	}
	results := make([]result, scopes)
	record := func(s int, tok uint64, err error) error {
		r := &results[s]
		r.mu.Lock()
		defer r.mu.Unlock()
		var stale *fence.StaleTokenError
		switch {
		case err == nil:
			r.accepted = append(r.accepted, tok)
		case errors.As(err, &stale):
			r.rejected = append(r.rejected, *stale)
		default:
			return err
		}
		return nil
	}

	var wg sync.WaitGroup
	errc := make(chan error, scopes*(writers+1))
	for s := range scopes {
		scope := fmt.Sprintf("%s/conc/%d", run, s)
		keys := []string{fenceredis.Key(scope, "log"), fenceredis.Key(scope, "data")}
		var issued atomic.Uint64
		issued.Store(base)
		staleToken := issued.Add(1) // the lowest token of the scope

		var writersDone sync.WaitGroup
		for w := range writers {
			wg.Add(1)
			writersDone.Add(1)
			go func() {
				defer wg.Done()
				defer writersDone.Done()
				rng := rand.New(rand.NewPCG(uint64(s), uint64(w)))
				tok := issued.Add(1)
				for range opsPerW {
					_, err := g.Eval(ctx, scope, tok, logScript, keys)
					if err := record(s, tok, err); err != nil {
						errc <- err
						return
					}
					// A stale holder has lost its authority (I7): it must
					// acquire again. Others sometimes lose theirs anyway,
					// like a lease that expired.
					if err != nil || rng.Float64() < reacquireP {
						tok = issued.Add(1)
					}
				}
			}()
		}

		wg.Add(1)
		go func() {
			defer wg.Done()
			done := make(chan struct{})
			go func() { writersDone.Wait(); close(done) }()
			for {
				finished := false
				select {
				case <-done:
					finished = true // every writer has written above staleToken
				default:
				}
				_, err := g.Eval(ctx, scope, staleToken, logScript, keys)
				if err := record(s, staleToken, err); err != nil {
					errc <- err
					return
				}
				if errors.Is(err, fence.ErrStaleToken) {
					return // I7: never retry a stale token
				}
				if finished {
					errc <- fmt.Errorf("scope %d: stale token %d accepted after higher tokens were", s, staleToken)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	if t.Failed() {
		return
	}

	for s := range scopes {
		scope := fmt.Sprintf("%s/conc/%d", run, s)
		raw, err := c.LRange(ctx, fenceredis.Key(scope, "log"), 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		list := make([]uint64, len(raw))
		for i, v := range raw {
			if list[i], err = strconv.ParseUint(v, 10, 64); err != nil {
				t.Fatalf("scope %d: log entry %d: %v", s, i, err)
			}
		}
		for i := 1; i < len(list); i++ {
			if list[i] < list[i-1] {
				t.Fatalf("scope %d: log entry %d = %d was applied after %d", s, i, list[i], list[i-1])
			}
		}

		r := &results[s]
		got, want := slices.Sorted(slices.Values(list)), slices.Sorted(slices.Values(r.accepted))
		if !slices.Equal(got, want) {
			t.Fatalf("scope %d: log holds %d tokens, callers saw %d accepted; they differ", s, len(got), len(want))
		}
		if len(r.rejected) == 0 {
			t.Fatalf("scope %d: no stale rejection, the test did not exercise the guard", s)
		}
		for _, st := range r.rejected {
			if st.Scope != scope || st.Highest <= st.Presented || !slices.Contains(list, st.Highest) {
				t.Fatalf("scope %d: rejection %+v: Highest must be an accepted token above Presented", s, st)
			}
		}
		last := list[len(list)-1]
		if h, err := g.Highest(ctx, scope); err != nil || h != last {
			t.Fatalf("scope %d: Highest = %d, %v; want last logged %d", s, h, err, last)
		}
		if v, err := c.Get(ctx, fenceredis.Key(scope, "data")).Result(); err != nil || v != strconv.FormatUint(last, 10) {
			t.Fatalf("scope %d: data = %q, %v; want %d", s, v, err, last)
		}
		t.Logf("scope %d: %d accepted, %d rejected", s, len(list), len(r.rejected))
	}
}
