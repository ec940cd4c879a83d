package fence

import (
	"context"
	"hash/maphash"
	"sync"
	"sync/atomic"

	"github.com/fencedio/fenced/fence/internal/scopelock"
)

// MemoryConfig configures NewMemory; the zero value is the default of every
// field. (The durable guard takes a fencebolt.Config of the same shape.)
type MemoryConfig struct {
	// Observer, if set, is told of every accepted and rejected mutation,
	// after the decision is final and outside the guard's locks. Mutations
	// that fail for other reasons (invalid input, apply or storage errors, a
	// cancelled ctx) are not reported. Default: none.
	Observer Observer
	// StrictSequences refuses, with a *SequenceGapError, a write whose
	// sequence (WithSequence) under the current token is not the last one
	// plus 1. Default: any sequence above the last is accepted.
	StrictSequences bool
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
	strict   bool
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
	sem     scopelock.Sem
	highest atomic.Uint64 // written only while sem is held; read freely by Highest
	last    uint64        // the last sequence accepted under highest; sem guards it
}

// NewMemory returns an empty in-memory guard.
//
// To carry highest tokens over a restart of the protected resource, replay
// them on start with Do and an apply that does nothing.
func NewMemory(cfg MemoryConfig) *Memory {
	m := &Memory{seed: maphash.MakeSeed(), observer: cfg.Observer, strict: cfg.StrictSequences}
	for i := range m.shards {
		m.shards[i].scopes = make(map[string]*memScope)
	}
	return m
}

// Do implements Guard. It waits for earlier mutations of scope to finish and
// returns ctx.Err() without calling apply if ctx ends first.
func (m *Memory) Do(ctx context.Context, scope string, token uint64, apply func(ctx context.Context) error) error {
	if err := CheckSequence(scope, token, SequenceFromContext(ctx), 0, 0, false); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s := m.scope(scope)
	d, report, err := s.do(ctx, scope, token, SequenceFromContext(ctx), m.strict, apply)
	if report && m.observer != nil {
		m.observer.Observe(ctx, withOwner(ctx, d))
	}
	return err
}

// do returns the decision, whether to report it, and the error
// for the caller. The lock is released before the caller reports, which
// keeps slow observers from holding up the scope.
func (s *memScope) do(ctx context.Context, scope string, token, seq uint64, strict bool, apply func(context.Context) error) (Decision, bool, error) {
	if err := s.sem.Lock(ctx); err != nil {
		return Decision{}, false, err
	}
	defer s.sem.Unlock()
	highest := s.highest.Load()
	d := Decision{Scope: scope, Presented: token, Highest: highest, Sequence: seq}
	if err := CheckSequence(scope, token, seq, highest, s.last, strict); err != nil {
		return Rejected(d, err)
	}
	if err := apply(ctx); err != nil {
		return Decision{}, false, err
	}
	s.last = NextLast(token, seq, highest, s.last)
	if token > highest {
		s.highest.Store(token)
	}
	d.Accepted = true
	return d, true, nil
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
		s = &memScope{sem: scopelock.NewSem()}
		sh.scopes[name] = s
	}
	return s
}
