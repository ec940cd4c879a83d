package admission

import "sync"

// Leases counts, per client address and per client network, the current
// leases a node granted to callers from it. The log does not record addresses, so a node counts
// only the leases it granted itself: after a leader change the leases the
// old leader granted count against no address until they end.
type Leases struct {
	networks Networks
	mu       sync.Mutex
	byKey    map[string]grantedTo // key to the lease granted and to whom
	byAddr   map[string]int       // by address and by network: a network's name has a '/', an address none
}

type grantedTo struct{ id, addr string }

// NewLeases counts no lease yet; addresses are grouped by networks.
func NewLeases(networks Networks) *Leases {
	return &Leases{networks: networks, byKey: make(map[string]grantedTo), byAddr: make(map[string]int)}
}

// Count returns how many current leases addr holds, and how many its
// network holds.
func (c *Leases) Count(addr string) (byAddr, byNetwork int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byAddr[addr], c.byAddr[c.networks.Of(addr)]
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
	for _, k := range c.counted(addr) {
		c.byAddr[k]++
	}
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
	for _, k := range c.counted(g.addr) {
		if c.byAddr[k]--; c.byAddr[k] <= 0 {
			delete(c.byAddr, k)
		}
	}
}

// counted is what a lease granted to addr counts against: addr and its
// network, once when they are the same (an address that is not an IP).
func (c *Leases) counted(addr string) []string {
	if network := c.networks.Of(addr); network != addr {
		return []string{addr, network}
	}
	return []string{addr}
}

// Reset forgets every lease: the state they were granted in was replaced
// wholesale.
func (c *Leases) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.byKey)
	clear(c.byAddr)
}
