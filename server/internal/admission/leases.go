package admission

import (
	"sync"

	"github.com/fencedio/fenced/lease"
)

// Leases counts, per client address and per client network, the current
// leases a node granted to callers from it. The log does not record addresses, so a node counts
// only the leases it granted itself: after a leader change the leases the
// old leader granted count against no address until they end.
//
// The address a lease counts against is kept in the state's record of
// the lease (lease.Held.Client), which Leases alone reads and writes,
// under its lock: counting a lease costs no entry of its own.
type Leases struct {
	networks Networks
	mu       sync.Mutex
	byAddr   map[string]int // by address and by network: a network's name has a '/', an address none
}

// NewLeases counts no lease yet; addresses are grouped by networks.
func NewLeases(networks Networks) *Leases {
	return &Leases{networks: networks, byAddr: make(map[string]int)}
}

// Count returns how many current leases addr holds, and how many its
// network holds.
func (c *Leases) Count(addr string) (byAddr, byNetwork int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byAddr[addr], c.byAddr[c.networks.Of(addr)]
}

// Add counts the lease h records against addr, the address it was granted
// to, unless current (asked after counting, without Leases' lock) says
// the lease has ended already. A lease counts once, against the first
// address it was added with; nothing is counted for the empty address.
func (c *Leases) Add(addr string, h *lease.Held, current func() bool) {
	if addr == "" {
		return
	}
	c.mu.Lock()
	if h.Client == "" {
		h.Client = addr
		for _, k := range c.counted(addr) {
			c.byAddr[k]++
		}
	}
	c.mu.Unlock()
	// The lease may have ended before it was counted, and Ended would
	// then have found nothing to drop.
	if !current() {
		c.Ended(h)
	}
}

// Ended stops counting the lease h records, if it counts: the lease has
// ended.
func (c *Leases) Ended(h *lease.Held) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if h == nil || h.Client == "" {
		return
	}
	for _, k := range c.counted(h.Client) {
		if c.byAddr[k]--; c.byAddr[k] <= 0 {
			delete(c.byAddr, k)
		}
	}
	h.Client = ""
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
// wholesale, and the records of its leases with it. An Add of a record of
// the replaced state that runs meanwhile counts nothing as long as its
// current compares records: the new state's record of the same lease is
// another one.
func (c *Leases) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.byAddr)
}
