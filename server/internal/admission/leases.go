package admission

import "sync"

// Leases counts, per client address, the current leases a node granted
// to callers from it. The log does not record addresses, so a node counts
// only the leases it granted itself: after a leader change the leases the
// old leader granted count against no address until they end.
type Leases struct {
	mu     sync.Mutex
	byKey  map[string]grantedTo // key to the lease granted and to whom
	byAddr map[string]int
}

type grantedTo struct{ id, addr string }

// NewLeases counts no lease yet.
func NewLeases() *Leases {
	return &Leases{byKey: make(map[string]grantedTo), byAddr: make(map[string]int)}
}

// Count returns how many current leases addr holds.
func (c *Leases) Count(addr string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byAddr[addr]
}

// Add records that addr was granted lease id of key, replacing the lease
// of key recorded before, unless current (asked after recording, without
// Leases' lock) says the lease has ended already. Nothing is recorded for
// the empty address.
func (c *Leases) Add(addr, key, id string, current func() bool) {
	if addr == "" {
		return
	}
	c.mu.Lock()
	if prev, ok := c.byKey[key]; ok {
		c.dropLocked(key, prev)
	}
	c.byKey[key] = grantedTo{id: id, addr: addr}
	c.byAddr[addr]++
	c.mu.Unlock()
	// The lease may have ended before it was recorded, and Ended would
	// then have found nothing to drop.
	if !current() {
		c.Ended(key, id)
	}
}

// Ended drops lease id of key, if recorded: the lease has ended.
func (c *Leases) Ended(key, id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if g, ok := c.byKey[key]; ok && g.id == id {
		c.dropLocked(key, g)
	}
}

func (c *Leases) dropLocked(key string, g grantedTo) {
	delete(c.byKey, key)
	if c.byAddr[g.addr]--; c.byAddr[g.addr] <= 0 {
		delete(c.byAddr, g.addr)
	}
}

// Reset forgets every lease: the state they were granted in was replaced
// wholesale.
func (c *Leases) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.byKey)
	clear(c.byAddr)
}
