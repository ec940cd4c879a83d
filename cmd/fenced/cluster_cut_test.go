package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/fencedio/fenced/client"
)

// TestLeaderDeathNeverCancels kills the leader of a 3-node cluster several
// times while clients loop acquiring and releasing through every endpoint.
// Calls in flight at the leader, or forwarded to it, are cut: connect-go
// reports the reset connection as canceled, which the callers never asked
// for. No error a caller sees may be canceled; the calls cut go to the next
// node (unavailable), and an Acquire's outcome is then uncertain.
func TestLeaderDeathNeverCancels(t *testing.T) {
	c := newTestCluster(t, 3)
	c.waitLeader(20 * time.Second)

	const workers, kills = 6, 4
	var (
		acquired atomic.Int64
		mu       sync.Mutex
		errs     = map[string]int{} // by code or sentinel
		canceled []error
	)
	record := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		kind := connect.CodeOf(err).String()
		switch {
		case errors.Is(err, client.ErrAcquireUncertain):
			kind = "uncertain"
		case errors.Is(err, context.DeadlineExceeded):
			kind = "deadline"
		}
		errs[kind]++
		if errors.Is(err, context.Canceled) || connect.CodeOf(err) == connect.CodeCanceled {
			canceled = append(canceled, err)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Half the workers start at a follower, half at the leader.
			urls := c.urls()
			urls = append(urls[w%3:], urls[:w%3]...)
			cl, err := client.New(client.Config{Endpoints: urls, Owner: fmt.Sprintf("w%d", w), TTL: 5 * time.Second})
			if err != nil {
				t.Error(err)
				return
			}
			defer cl.CloseIdleConnections()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				l, err := cl.Acquire(ctx, fmt.Sprintf("cut/%d/%d", w, i))
				if err != nil {
					record(err)
				} else {
					acquired.Add(1)
					if err := l.Release(ctx); err != nil {
						record(err)
					}
				}
				cancel()
			}
		}()
	}
	// progress waits until the workers acquired n more keys.
	progress := func(n int64) {
		t.Helper()
		from, deadline := acquired.Load(), time.Now().Add(30*time.Second)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for acquired.Load() < from+n {
			if time.Now().After(deadline) {
				t.Fatalf("%d acquisitions in 30s, want %d", acquired.Load()-from, n)
			}
			<-tick.C
		}
	}
	for range kills {
		progress(50)
		leader := c.waitLeader(20 * time.Second)
		c.kill(leader)
		progress(20) // served by the new leader
		c.start(leader)
		c.waitLeader(20 * time.Second)
	}
	progress(50)
	close(stop)
	wg.Wait()
	t.Logf("%d acquisitions over %d leader deaths; errors: %v", acquired.Load(), kills, errs)
	for _, err := range canceled {
		t.Errorf("a caller got canceled, which it never asked for: %v", err)
	}
}
