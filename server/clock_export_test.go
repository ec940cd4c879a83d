package server

import (
	"sync"
	"time"
)

// ManualClock is a lease clock that moves only when a test advances it:
// the fake clock of tests of a running node (see expiry.Expirer.clock for
// why these cannot use testing/synctest). Raft's own timing (heartbeats,
// elections) stays on the wall clock.
type ManualClock struct {
	mu  sync.Mutex
	now time.Time
	s   *Server
}

// UseManualClock puts s's lease deadlines on a manual clock, stopped at the
// current time. Call it before the test grants any lease: deadlines already
// tracked were measured on the wall clock.
func UseManualClock(s *Server) *ManualClock {
	c := &ManualClock{now: time.Now(), s: s}
	s.expirer.SetClock(c.Now)
	return c
}

// Now returns the manual time.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d and lets the server expire whatever
// came due.
func (c *ManualClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
	c.s.expirer.Wake()
}
