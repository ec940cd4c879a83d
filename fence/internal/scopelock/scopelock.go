// Package scopelock holds the per-scope locks of the fencing guards: a
// mutex whose waiters give up when their context ends, and a table of them
// keyed by scope.
package scopelock

import (
	"context"
	"hash/maphash"
	"sync"
)

// shardCount spreads scopes over independent locks; a power of two, so a
// mask picks the shard.
const shardCount = 64

// Sem is a mutex whose waiters can give up when their ctx ends: a
// mutation stuck behind a slow apply of the same scope should not outlive
// its caller.
type Sem chan struct{}

// NewSem returns an unlocked Sem.
func NewSem() Sem { return make(Sem, 1) }

// Lock takes s, or returns ctx.Err() if ctx ends first.
func (s Sem) Lock(ctx context.Context) error {
	select {
	case s <- struct{}{}:
		return nil
	default:
	}
	select {
	case s <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Unlock releases s, which must be held.
func (s Sem) Unlock() { <-s }

// Locks hands out one lock per scope for guards that keep the highest
// tokens elsewhere. An entry lives only while someone holds or waits for it,
// so the table stays as small as the number of scopes in flight.
type Locks struct {
	seed   maphash.Seed
	shards [shardCount]lockShard
}

type lockShard struct {
	mu sync.Mutex
	m  map[string]*scopeLock
}

type scopeLock struct {
	sem  Sem
	refs int // guarded by the shard's mu
}

// NewLocks returns an empty table.
func NewLocks() *Locks {
	l := &Locks{seed: maphash.MakeSeed()}
	for i := range l.shards {
		l.shards[i].m = make(map[string]*scopeLock)
	}
	return l
}

// Lock acquires the lock of scope, or returns ctx.Err() if ctx ends first.
// A nil error must be paired with Unlock.
func (l *Locks) Lock(ctx context.Context, scope string) error {
	sh := &l.shards[maphash.String(l.seed, scope)&(shardCount-1)]
	sh.mu.Lock()
	e := sh.m[scope]
	if e == nil {
		e = &scopeLock{sem: NewSem()}
		sh.m[scope] = e
	}
	e.refs++
	sh.mu.Unlock()
	if err := e.sem.Lock(ctx); err != nil {
		l.release(sh, scope, e)
		return err
	}
	return nil
}

// Unlock releases the lock of scope, which must be held.
func (l *Locks) Unlock(scope string) {
	sh := &l.shards[maphash.String(l.seed, scope)&(shardCount-1)]
	sh.mu.Lock()
	e := sh.m[scope]
	e.sem.Unlock() // never blocks: the semaphore is held
	l.drop(sh, scope, e)
	sh.mu.Unlock()
}

func (l *Locks) release(sh *lockShard, scope string, e *scopeLock) {
	sh.mu.Lock()
	l.drop(sh, scope, e)
	sh.mu.Unlock()
}

// drop forgets one user of e; the caller holds sh.mu.
func (l *Locks) drop(sh *lockShard, scope string, e *scopeLock) {
	e.refs--
	if e.refs == 0 {
		delete(sh.m, scope)
	}
}
