package client

import (
	"sync"
	"time"
)

// background counts what a client runs besides its callers' calls
// (goroutines, and timer callbacks from when they are armed until they have
// run or been stopped) and the leases it holds, so that Close can end the
// leases and then wait until nothing is left running.
type background struct {
	mu     sync.Mutex
	idle   sync.Cond // broadcast when running drops to 0
	run    int
	leases map[*Lease]struct{}
	closed bool
}

func (b *background) add() {
	b.mu.Lock()
	b.run++
	b.mu.Unlock()
}

func (b *background) done() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.run--; b.run == 0 {
		b.idle.Broadcast()
	}
}

// goFn runs f in a goroutine of its own, counted until f returns.
func (b *background) goFn(f func()) {
	b.add()
	go func() {
		defer b.done()
		f()
	}()
}

// afterFunc is time.AfterFunc, its callback counted from now until it has
// run; stop and reset keep the count when the timer is stopped or armed
// again.
func (b *background) afterFunc(d time.Duration, f func()) *time.Timer {
	b.add()
	return time.AfterFunc(d, func() {
		defer b.done()
		f()
	})
}

func (b *background) stop(t *time.Timer) {
	if t.Stop() {
		b.done() // its callback will not run
	}
}

func (b *background) reset(t *time.Timer, d time.Duration) {
	if !t.Reset(d) {
		b.add() // it had run or been stopped: one more callback to come
	}
}

// closing reports whether Close has been called.
func (b *background) closing() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closed
}

// hold records a new lease; false after Close.
func (b *background) hold(l *Lease) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	if b.leases == nil {
		b.leases = make(map[*Lease]struct{})
	}
	b.leases[l] = struct{}{}
	return true
}

func (b *background) forget(l *Lease) {
	b.mu.Lock()
	delete(b.leases, l)
	b.mu.Unlock()
}

// close marks the client closed and returns the leases it holds.
func (b *background) close() []*Lease {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	held := make([]*Lease, 0, len(b.leases))
	for l := range b.leases {
		held = append(held, l)
	}
	return held
}

// wait returns once nothing counted is left running.
func (b *background) wait() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for b.run > 0 {
		b.idle.Wait()
	}
}
