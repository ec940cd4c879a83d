package admission

import (
	"sync"
	"sync/atomic"
)

// CallSlots counts the calls in progress per client address, at most
// limit each. The other shares bound what a client holds (leases,
// waiters, connections); this one bounds the work it makes the node do at
// once, so that other clients' calls wait behind at most limit of its
// calls.
type CallSlots struct {
	limit int
	mu    sync.Mutex
	inUse map[string]int
}

// NewCallSlots gives every address limit slots.
func NewCallSlots(limit int) *CallSlots {
	return &CallSlots{limit: limit, inUse: make(map[string]int)}
}

// Take reserves a slot for a call from addr into slot, or returns false
// and the slots addr has in use when all of its slots are taken.
func (c *CallSlots) Take(addr string, slot *Slot) (bool, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.inUse[addr]
	if n >= c.limit {
		return false, n
	}
	c.inUse[addr] = n + 1
	slot.slots, slot.addr = c, addr
	return true, n + 1
}

// InUse is how many slots addr has taken and not given back.
func (c *CallSlots) InUse(addr string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.inUse[addr]
}

// Slot is one call's slot. The zero Slot holds none.
type Slot struct {
	slots    *CallSlots
	addr     string
	released atomic.Bool
}

// Release gives the slot back, once: a call gives it back early when it
// is about to wait for something other than the node's cores, and again,
// to no effect, when it ends.
func (s *Slot) Release() {
	if s == nil || s.slots == nil || s.released.Swap(true) {
		return
	}
	c := s.slots
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inUse[s.addr]--; c.inUse[s.addr] <= 0 {
		delete(c.inUse, s.addr)
	}
}
