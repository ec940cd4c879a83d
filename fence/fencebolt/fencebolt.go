package fencebolt

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/internal/scopelock"
)

// Bucket is the bucket in which a Guard keeps the highest token of each
// scope: key = scope, value = token as 8 bytes, big-endian, followed by the
// last sequence accepted under it as 8 more once a write carried one
// (fence.WithSequence). Data kept in the
// same file (see Guard.DoTx) must live in other buckets.
const Bucket = "fence.highest"

// DefaultTimeout is how long Open waits for the file lock held by another
// process before giving up, unless Config.Bolt says otherwise.
const DefaultTimeout = 5 * time.Second

// Config configures Open; the zero value is the default of every field.
type Config struct {
	// Observer, if set, is told of every accepted and rejected mutation,
	// as fence.MemoryConfig.Observer is. Default: none.
	Observer fence.Observer
	// StrictSequences refuses a sequence other than the last plus 1 under
	// the current token, as fence.MemoryConfig.StrictSequences does.
	// Default: any sequence above the last is accepted.
	StrictSequences bool
	// Bolt are the options passed to bbolt.Open. Default: bbolt's defaults
	// with Timeout = DefaultTimeout. Open refuses NoSync and ReadOnly,
	// which would break its durability promise.
	Bolt *bbolt.Options
}

// Guard is a durable fence.Guard that keeps the highest token per scope in
// a bbolt file. A token is written and fsynced before Do or DoTx reports
// success, so an acknowledged mutation's token survives a crash of the
// process (kill -9) or of the machine, as far as the disk honours fsync.
//
// There are two ways to apply a mutation, with different crash behaviour:
//
//   - Do runs apply outside any bbolt transaction, then records the token.
//     The mutation and the token are not atomic: a crash after apply and
//     before the token is on disk leaves the resource changed but the highest
//     token not raised. After a restart, a writer whose token is below the
//     lost one but not below the recorded one is then accepted, and may
//     overwrite the newer write. Do never acknowledges a mutation whose token
//     is not on disk, and a crash never lowers a recorded token. Use Do when
//     the resource lives elsewhere and that window is acceptable.
//   - DoTx runs the mutation inside the same bbolt transaction that checks
//     and records the token, so both commit or neither does. Use it for data
//     kept in the same file.
//
// Mutations of one scope are serialized by an in-memory lock per scope, which
// is held while apply runs. bbolt allows one write transaction at a time, so
// recording tokens of different scopes is serialized too: each raising of a
// highest token costs a commit and an fsync, and those do not overlap. Do
// skips the write when the token equals the highest already recorded, so a
// holder writing repeatedly with its token pays for one fsync only. (bbolt's
// DB.Batch would coalesce commits of concurrent scopes, but it delays every
// lone commit by up to its batch delay and may run a function more than once,
// which the caller's function in DoTx cannot be expected to tolerate.)
//
// Only one process can open the file at a time (bbolt takes an exclusive
// file lock).
type Guard struct {
	db       *bbolt.DB
	locks    *scopelock.Locks
	observer fence.Observer
	strict   bool

	// Close waits for mutations in progress: closing the file between a
	// successful apply and the recording of its token would lose the token.
	mu       sync.Mutex
	idle     sync.Cond // signalled when inflight drops to 0 after closed
	inflight int
	closed   bool
}

var _ fence.Guard = (*Guard)(nil)

// Open opens or creates the bbolt file at path and prepares it to hold
// highest tokens. Close releases it.
func Open(path string, cfg Config) (*Guard, error) {
	bo := bbolt.Options{Timeout: DefaultTimeout}
	if cfg.Bolt != nil {
		bo = *cfg.Bolt
	}
	if bo.NoSync {
		return nil, fmt.Errorf("fencebolt: open %s: bbolt NoSync would lose acknowledged tokens", path)
	}
	if bo.ReadOnly {
		return nil, fmt.Errorf("fencebolt: open %s: a guard cannot be read-only", path)
	}
	db, err := bbolt.Open(path, 0o600, &bo)
	if err != nil {
		return nil, fmt.Errorf("fencebolt: open %s: %w", path, err)
	}
	err = db.Update(func(tx *bbolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists([]byte(Bucket))
		return err
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("fencebolt: open %s: create bucket: %w", path, err)
	}
	g := &Guard{db: db, locks: scopelock.NewLocks(), observer: cfg.Observer, strict: cfg.StrictSequences}
	g.idle.L = &g.mu
	return g, nil
}

// Close waits for mutations in progress, including their apply, then closes
// the file. Later mutations fail with an error matching
// bbolt/errors.ErrDatabaseNotOpen.
func (b *Guard) Close() error {
	b.mu.Lock()
	b.closed = true
	for b.inflight > 0 {
		b.idle.Wait()
	}
	b.mu.Unlock()
	if err := b.db.Close(); err != nil {
		return fmt.Errorf("fencebolt: close: %w", err)
	}
	return nil
}

// DB returns the underlying database, for data kept next to the tokens and
// for backups. Callers must not write to Bucket nor turn on NoSync, and
// must not write data protected by a scope except through DoTx.
func (b *Guard) DB() *bbolt.DB { return b.db }

// Do implements fence.Guard; see Guard for what a crash in the middle
// does. It waits for earlier mutations of scope to finish and returns ctx.Err()
// without calling apply if ctx ends first.
//
// If apply succeeds but the token cannot be recorded (a disk error, a closed
// database), Do returns an error although the mutation was applied.
func (b *Guard) Do(ctx context.Context, scope string, token uint64, apply func(ctx context.Context) error) error {
	d, report, err := b.run(ctx, scope, token, func() (fence.Decision, bool, error) {
		return b.do(ctx, scope, token, apply)
	})
	if report && b.observer != nil {
		b.observer.Observe(ctx, withOwner(ctx, d))
	}
	return err
}

func (b *Guard) do(ctx context.Context, scope string, token uint64, apply func(context.Context) error) (fence.Decision, bool, error) {
	st, err := b.load(scope)
	if err != nil {
		return fence.Decision{}, false, err
	}
	seq := fence.SequenceFromContext(ctx)
	d := fence.Decision{Scope: scope, Presented: token, Highest: st.highest, Sequence: seq}
	if err := fence.CheckSequence(scope, token, seq, st.highest, st.last, b.strict); err != nil {
		return fence.Rejected(d, err)
	}
	if err := apply(ctx); err != nil {
		return fence.Decision{}, false, err
	}
	if next := st.next(token, seq); next != st {
		err := b.db.Update(func(tx *bbolt.Tx) error {
			// The scope lock keeps other guard calls out, so the stored value
			// is still st; comparing again costs nothing and keeps the
			// token from ever going down.
			cur, err := read(tx, scope)
			if err != nil || token < cur.highest {
				return err
			}
			return write(tx, scope, next)
		})
		if err != nil {
			return fence.Decision{}, false, fmt.Errorf("fencebolt: record token %d of %q after applying: %w", token, scope, err)
		}
	}
	d.Accepted = true
	return d, true, nil
}

// DoTx is Do with the mutation inside the bbolt write transaction that
// checks and records the token: apply's writes and the new highest token
// commit together, durably, or not at all. If the token is stale, apply is
// not called. If apply returns an error, the transaction is rolled back and
// the error is returned as is.
//
// While apply runs, the database accepts no other write, so apply should be
// quick. It must not call Commit or Rollback, must not write Bucket, and
// must not call back into the guard (that would deadlock).
func (b *Guard) DoTx(ctx context.Context, scope string, token uint64, apply func(tx *bbolt.Tx) error) error {
	d, report, err := b.run(ctx, scope, token, func() (fence.Decision, bool, error) {
		return b.doTx(ctx, scope, token, apply)
	})
	if report && b.observer != nil {
		b.observer.Observe(ctx, withOwner(ctx, d))
	}
	return err
}

func (b *Guard) doTx(ctx context.Context, scope string, token uint64, apply func(*bbolt.Tx) error) (fence.Decision, bool, error) {
	var (
		refused error
		d       = fence.Decision{Scope: scope, Presented: token, Sequence: fence.SequenceFromContext(ctx)}
	)
	err := b.db.Update(func(tx *bbolt.Tx) error {
		st, err := read(tx, scope)
		if err != nil {
			return err
		}
		d.Highest = st.highest
		if err := fence.CheckSequence(scope, token, d.Sequence, st.highest, st.last, b.strict); err != nil {
			refused = err
			return err
		}
		if err := apply(tx); err != nil {
			return err
		}
		if next := st.next(token, d.Sequence); next != st {
			return write(tx, scope, next)
		}
		return nil
	})
	switch {
	case refused != nil:
		return fence.Rejected(d, refused)
	case err != nil:
		return fence.Decision{}, false, err
	}
	d.Accepted = true
	return d, true, nil
}

// run validates the input and calls fn while holding the lock of scope. The
// scope lock is taken for DoTx too: without it, a DoTx with a higher token
// could commit while a Do with a lower one is between its check and its
// apply.
func (b *Guard) run(ctx context.Context, scope string, token uint64, fn func() (fence.Decision, bool, error)) (fence.Decision, bool, error) {
	if err := fence.CheckSequence(scope, token, fence.SequenceFromContext(ctx), 0, 0, false); err != nil {
		return fence.Decision{}, false, err
	}
	if err := ctx.Err(); err != nil {
		return fence.Decision{}, false, err
	}
	if err := b.enter(); err != nil {
		return fence.Decision{}, false, err
	}
	defer b.leave()
	if err := b.locks.Lock(ctx, scope); err != nil {
		return fence.Decision{}, false, err
	}
	defer b.locks.Unlock(scope)
	return fn()
}

func (b *Guard) enter() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return fmt.Errorf("fencebolt: %w", berrors.ErrDatabaseNotOpen)
	}
	b.inflight++
	return nil
}

func (b *Guard) leave() {
	b.mu.Lock()
	b.inflight--
	if b.closed && b.inflight == 0 {
		b.idle.Broadcast()
	}
	b.mu.Unlock()
}

// Highest implements fence.Guard. It reads the recorded token without
// waiting for a mutation in progress.
func (b *Guard) Highest(ctx context.Context, scope string) (uint64, error) {
	if err := fence.ValidateScope(scope); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	st, err := b.load(scope)
	return st.highest, err
}

// load reads the state recorded for scope in a read transaction of its own.
func (b *Guard) load(scope string) (state, error) {
	var st state
	err := b.db.View(func(tx *bbolt.Tx) error {
		var err error
		st, err = read(tx, scope)
		return err
	})
	if err != nil {
		return state{}, fmt.Errorf("fencebolt: read highest token of %q: %w", scope, err)
	}
	return st, nil
}

// HighestTx returns the highest token recorded for scope as seen by tx, 0 if
// none: inside DoTx's apply, the highest before this mutation. It lets data
// kept in the same file record what it was written over (an audit, for
// instance) without a second transaction. A stored value that is not a
// token is an error, never 0, so a damaged file cannot turn fencing off.
func (b *Guard) HighestTx(tx *bbolt.Tx, scope string) (uint64, error) {
	if err := fence.ValidateScope(scope); err != nil {
		return 0, err
	}
	st, err := read(tx, scope)
	if err != nil {
		return 0, fmt.Errorf("fencebolt: read highest token of %q: %w", scope, err)
	}
	return st.highest, nil
}

// A valid scope always fits a bbolt key, so a scope is never found too long
// only when its token is recorded, after apply has run.
var _ [bbolt.MaxKeySize - fence.MaxScopeBytes]struct{}

var errNoBucket = errors.New("bucket " + Bucket + " is missing")

// state is what the bucket holds for a scope: the highest token, and the
// last sequence accepted under it (0 if none).
type state struct{ highest, last uint64 }

// next is the state after accepting token with seq (0: none).
func (st state) next(token, seq uint64) state {
	return state{highest: max(token, st.highest), last: fence.NextLast(token, seq, st.highest, st.last)}
}

func read(tx *bbolt.Tx, scope string) (state, error) {
	bk := tx.Bucket([]byte(Bucket))
	if bk == nil {
		return state{}, errNoBucket
	}
	v := bk.Get([]byte(scope))
	switch len(v) {
	case 0:
		return state{}, nil
	case 8:
		return state{highest: binary.BigEndian.Uint64(v)}, nil
	case 16:
		return state{highest: binary.BigEndian.Uint64(v), last: binary.BigEndian.Uint64(v[8:])}, nil
	}
	return state{}, fmt.Errorf("corrupt token of %q: %d bytes", scope, len(v))
}

// write stores st; without a sequence the value is the 8-byte token alone,
// as guards without sequences have always written it.
func write(tx *bbolt.Tx, scope string, st state) error {
	bk := tx.Bucket([]byte(Bucket))
	if bk == nil {
		return errNoBucket
	}
	v := binary.BigEndian.AppendUint64(make([]byte, 0, 16), st.highest)
	if st.last != 0 {
		v = binary.BigEndian.AppendUint64(v, st.last)
	}
	return bk.Put([]byte(scope), v)
}

// withOwner fills d.Owner from ctx before the decision is observed.
func withOwner(ctx context.Context, d fence.Decision) fence.Decision {
	d.Owner = fence.OwnerFromContext(ctx)
	return d
}

// DoLease is Do for a lease: the lease's key is the scope, its token the
// token, and a stale rejection calls l.MarkLost (see fence.DoLease).
func (b *Guard) DoLease(ctx context.Context, l fence.Lease, apply func(ctx context.Context) error) error {
	return fence.DoLease(ctx, b, l, apply)
}

// DoTxLease is DoTx for a lease: the lease's key is the scope, its token the
// token, and a stale rejection calls l.MarkLost (see fence.ReportStale).
func (b *Guard) DoTxLease(ctx context.Context, l fence.Lease, apply func(tx *bbolt.Tx) error) error {
	return fence.ReportStale(l, b.DoTx(fence.LeaseContext(ctx, l), l.Key(), l.Token(), apply))
}
