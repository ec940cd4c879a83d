package fence

import (
	"context"
	"hash/maphash"
	"sync"
	"sync/atomic"
)

// Option configures any guard of this package: NewMemory and OpenBolt
// take it. Settings that only one guard has are of their own type (see
// BoltOption), so a constructor cannot be given one it would ignore.
type Option func(*options)

type options struct {
	observer Observer
}

func newOptions(opts []Option) options {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// WithObserver makes the guard report every accepted and rejected mutation
// to o. The guard calls o after the decision is final and outside its locks.
// Mutations that fail for other reasons (invalid input, apply or storage
// errors, a cancelled ctx) are not reported. Default: no observer.
func WithObserver(o Observer) Option {
	return func(opts *options) { opts.observer = o }
}

// shardCount spreads scopes over independent locks so that lookups of
// unrelated scopes do not contend. A power of two, so a mask picks the shard.
const shardCount = 64

// Memory is a Guard that keeps the highest token per scope in memory.
//
// Mutations of one scope are serialized by a lock of their own; mutations of
// different scopes run in parallel. Memory never forgets a scope (doing so
// would forget its highest token), so its size grows with the number of
// distinct scopes it has seen.
type Memory struct {
	seed     maphash.Seed
	observer Observer
	shards   [shardCount]memShard
}

var _ Guard = (*Memory)(nil)

type memShard struct {
	mu     sync.RWMutex
	scopes map[string]*memScope
	// Keeps neighbouring shards off one cache line, so readers of one shard
	// do not slow down readers of the next.
	_ [32]byte
}

type memScope struct {
	sem     scopeSem
	highest atomic.Uint64 // written only while sem is held; read freely by Highest
}

// NewMemory returns an empty in-memory guard.
//
// To carry highest tokens over a restart of the protected resource, replay
// them on start with Do and an apply that does nothing.
func NewMemory(opts ...Option) *Memory {
	o := newOptions(opts)
	m := &Memory{seed: maphash.MakeSeed(), observer: o.observer}
	for i := range m.shards {
		m.shards[i].scopes = make(map[string]*memScope)
	}
	return m
}

// Do implements Guard. It waits for earlier mutations of scope to finish and
// returns ctx.Err() without calling apply if ctx ends first.
func (m *Memory) Do(ctx context.Context, scope string, token uint64, apply func(ctx context.Context) error) error {
	if err := Check(scope, token, 0); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s := m.scope(scope)
	d, report, err := s.do(ctx, scope, token, apply)
	if report && m.observer != nil {
		m.observer.Observe(ctx, withOwner(ctx, d))
	}
	return err
}

// do returns the decision, whether to report it, and the error
// for the caller. The lock is released before the caller reports, which
// keeps slow observers from holding up the scope.
func (s *memScope) do(ctx context.Context, scope string, token uint64, apply func(context.Context) error) (Decision, bool, error) {
	if err := s.sem.lock(ctx); err != nil {
		return Decision{}, false, err
	}
	defer s.sem.unlock()
	highest := s.highest.Load()
	if err := Check(scope, token, highest); err != nil {
		return Decision{Scope: scope, Presented: token, Highest: highest}, true, err
	}
	if err := apply(ctx); err != nil {
		return Decision{}, false, err
	}
	if token > highest {
		s.highest.Store(token)
	}
	return Decision{Scope: scope, Presented: token, Highest: highest, Accepted: true}, true, nil
}

// Highest implements Guard. It does not wait for a mutation in progress; it
// reports the highest token recorded so far.
func (m *Memory) Highest(ctx context.Context, scope string) (uint64, error) {
	if err := ValidateScope(scope); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	sh := &m.shards[maphash.String(m.seed, scope)&(shardCount-1)]
	sh.mu.RLock()
	s := sh.scopes[scope]
	sh.mu.RUnlock()
	if s == nil {
		return 0, nil
	}
	return s.highest.Load(), nil
}

// scope returns the entry for name, creating it on first use.
func (m *Memory) scope(name string) *memScope {
	sh := &m.shards[maphash.String(m.seed, name)&(shardCount-1)]
	sh.mu.RLock()
	s := sh.scopes[name]
	sh.mu.RUnlock()
	if s != nil {
		return s
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if s = sh.scopes[name]; s == nil {
		s = &memScope{sem: newScopeSem()}
		sh.scopes[name] = s
	}
	return s
}

// scopeSem is a mutex whose waiters can give up when their ctx ends: a
// mutation stuck behind a slow apply of the same scope should not outlive
// its caller.
type scopeSem chan struct{}

func newScopeSem() scopeSem { return make(scopeSem, 1) }

func (s scopeSem) lock(ctx context.Context) error {
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

func (s scopeSem) unlock() { <-s }

// scopeLocks hands out one lock per scope for guards that keep the highest
// tokens elsewhere. An entry lives only while someone holds or waits for it,
// so the table stays as small as the number of scopes in flight.
type scopeLocks struct {
	seed   maphash.Seed
	shards [shardCount]lockShard
}

type lockShard struct {
	mu sync.Mutex
	m  map[string]*scopeLock
}

type scopeLock struct {
	sem  scopeSem
	refs int // guarded by the shard's mu
}

func newScopeLocks() *scopeLocks {
	l := &scopeLocks{seed: maphash.MakeSeed()}
	for i := range l.shards {
		l.shards[i].m = make(map[string]*scopeLock)
	}
	return l
}

// lock acquires the lock of scope, or returns ctx.Err() if ctx ends first.
// A nil error must be paired with unlock.
func (l *scopeLocks) lock(ctx context.Context, scope string) error {
	sh := &l.shards[maphash.String(l.seed, scope)&(shardCount-1)]
	sh.mu.Lock()
	e := sh.m[scope]
	if e == nil {
		e = &scopeLock{sem: newScopeSem()}
		sh.m[scope] = e
	}
	e.refs++
	sh.mu.Unlock()
	if err := e.sem.lock(ctx); err != nil {
		l.release(sh, scope, e)
		return err
	}
	return nil
}

func (l *scopeLocks) unlock(scope string) {
	sh := &l.shards[maphash.String(l.seed, scope)&(shardCount-1)]
	sh.mu.Lock()
	e := sh.m[scope]
	e.sem.unlock() // never blocks: the semaphore is held
	l.drop(sh, scope, e)
	sh.mu.Unlock()
}

func (l *scopeLocks) release(sh *lockShard, scope string, e *scopeLock) {
	sh.mu.Lock()
	l.drop(sh, scope, e)
	sh.mu.Unlock()
}

// drop forgets one user of e; the caller holds sh.mu.
func (l *scopeLocks) drop(sh *lockShard, scope string, e *scopeLock) {
	e.refs--
	if e.refs == 0 {
		delete(sh.m, scope)
	}
}
