package leadercheck

import (
	"context"
	"sync"
)

// Check coalesces leadership confirmations. Every caller waits for a
// confirmation round that started after it arrived, so the answer covers
// its moment; callers that arrive while a round runs share the next one.
// Under load this turns one raft heartbeat round per renewal into one per
// batch of renewals.
type Check struct {
	Verify func() error // one round: raft's VerifyLeader
	// Sole, if set, reports whether this node is the only voter and leads:
	// its own state is then the quorum contact, read after the caller
	// arrived, and Confirm answers at once without a round (raft's
	// VerifyLeader answers a single voter the same way, after a trip
	// through its main loop).
	Sole func() bool

	mu      sync.Mutex
	next    *checkRound // the round waiting to start, joined by new callers
	running bool
}

type checkRound struct {
	done chan struct{}
	err  error
}

// Confirm returns nil once a round that started after the call confirmed
// leadership, or ctx's error if ctx ends first (nothing confirmed; the round
// goes on for the others).
func (c *Check) Confirm(ctx context.Context) error {
	if c.Sole != nil && c.Sole() {
		return nil
	}
	c.mu.Lock()
	if c.next == nil {
		c.next = &checkRound{done: make(chan struct{})}
	}
	round := c.next
	if !c.running {
		c.running = true
		c.next = nil
		go c.run(round)
	}
	c.mu.Unlock()
	select {
	case <-round.done:
		return round.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run runs rounds back to back until nobody is waiting.
func (c *Check) run(round *checkRound) {
	for round != nil {
		round.err = c.Verify()
		close(round.done)
		c.mu.Lock()
		round, c.next = c.next, nil
		if round == nil {
			c.running = false
		}
		c.mu.Unlock()
	}
}
