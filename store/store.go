package store

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/bbolt"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencebolt"
	"github.com/fencedio/fenced/fence/fenceprom"
)

// FileName is the name of the bbolt file inside Config.DataDir.
const FileName = "store.db"

// DefaultMaxValueBytes is the default limit on an object's value.
const DefaultMaxValueBytes = 1 << 20

// DefaultMaxInFlightBytes is the default limit on the request body bytes
// held at once by PUTs over HTTP.
const DefaultMaxInFlightBytes = 32 << 20

// ErrBusy refuses a PUT over HTTP whose body would take the bodies held at
// once beyond Config.MaxInFlightBytes: 503 with Retry-After, nothing read
// or applied.
var ErrBusy = errors.New("too many request bytes in flight")

// MaxNameBytes bounds object names, the same bound as lease keys and scopes.
const MaxNameBytes = fence.MaxScopeBytes

// openTimeout bounds the wait for bbolt's file lock, so that a second store
// on the same directory fails instead of hanging.
const openTimeout = 5 * time.Second

// schemaVersion is stored in the meta bucket; Open refuses other versions
// rather than misreading them. Version 1 kept the highest tokens in the
// store's own bucket (bucketHighestV1); version 2 leaves them to the
// fencebolt guard, in fencebolt.Bucket. Open moves a version 1 file to
// version 2; stores older than that refuse a version 2 file.
const schemaVersion = 2

var (
	bucketMeta      = []byte("meta")
	bucketObjects   = []byte("objects")
	bucketAudit     = []byte("audit")
	bucketHighestV1 = []byte("highest")
	keySchema       = []byte("schema")
)

// ErrNotFound is returned for a read or delete of an object that does not
// exist.
var ErrNotFound = errors.New("object not found")

// ErrInvalidName is returned for an object name that breaks the rule of
// scopes and lease keys (fence.ValidateScope): empty, longer than
// MaxNameBytes, not UTF-8, or with a character that is not printable.
var ErrInvalidName = errors.New("invalid object name")

// ErrUnauthenticated and ErrForbidden are matched by what Config.Authorize
// refuses: the HTTP API answers 401 and 403, nothing applied.
var (
	ErrUnauthenticated = errors.New("unauthenticated")
	ErrForbidden       = errors.New("forbidden")
)

// ErrTooLarge is returned for a value longer than Config.MaxValueBytes.
var ErrTooLarge = errors.New("value too large")

// ErrClosed is returned by every operation after Close.
var ErrClosed = errors.New("store closed")

// Op is the kind of an audited write.
type Op string

const (
	OpPut    Op = "put"
	OpDelete Op = "delete"
)

// AuditRecord describes one accepted write. The audit holds one record per
// accepted write, in commit order.
type AuditRecord struct {
	Seq   uint64 `json:"seq"`   // 1, 2, 3, ... in commit order
	Scope string `json:"scope"` // Fencing-Scope of the write
	Token uint64 `json:"token"` // Fencing-Token of the write
	// HighestBefore is the highest token of Scope before this write. Token <
	// HighestBefore happens only under NoFencing: a stale overwrite.
	HighestBefore uint64    `json:"highestBefore"`
	Object        string    `json:"object"`
	Op            Op        `json:"op"`
	Time          time.Time `json:"time"`
	ValueLength   int64     `json:"valueLength"` // 0 for deletes
	// Owner is the lease owner the write came with (Fencing-Owner,
	// fence.WithOwner); empty when none came.
	Owner string `json:"owner,omitempty"`
	// Sequence is the write's sequence under Token (Fencing-Sequence,
	// fence.WithSequence); 0 when none came. A (Scope, Token, Sequence)
	// with a sequence appears at most once in the audit.
	Sequence uint64 `json:"sequence,omitempty"`
}

// Stale reports whether the write presented a token below the scope's
// highest, which only a store running with NoFencing accepts.
func (r AuditRecord) Stale() bool { return r.Token < r.HighestBefore }

// Object is a stored value with the write that produced it.
type Object struct {
	Name     string
	Value    []byte
	Scope    string    // Fencing-Scope of the write that produced Value
	Token    uint64    // Fencing-Token of that write
	Seq      uint64    // audit sequence number of that write
	Modified time.Time // audit time of that write
}

// Store is a durable fenced object store. It is safe for concurrent use.
type Store struct {
	cfg     Config
	guard   *fencebolt.Guard // owns db and the highest token of every scope
	db      *bbolt.DB        // guard.DB(): objects and audit; writes go through guard.DoTx
	log     *slog.Logger
	metrics *metrics
	recent  *rejectionLog
	closed  atomic.Bool

	rejections atomic.Uint64 // stale rejections since Open
	inFlight   inFlight      // body bytes reserved by PUTs over HTTP
}

// inFlight counts the body bytes reserved by PUTs over HTTP, in all and
// per client IP address.
type inFlight struct {
	mu     sync.Mutex
	total  int64
	byAddr map[string]int64
}

// Open opens (creating if needed) the store in cfg.DataDir.
func Open(cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if err := os.MkdirAll(cfg.DataDir, 0o750); err != nil {
		return nil, fmt.Errorf("store: create data dir: %w", err)
	}
	path := filepath.Join(cfg.DataDir, FileName)
	guard, err := fencebolt.Open(path, fencebolt.Config{Bolt: &bbolt.Options{Timeout: openTimeout}, StrictSequences: cfg.StrictSequences})
	if err != nil {
		if errors.Is(err, bbolt.ErrTimeout) {
			return nil, fmt.Errorf("store: open %s: locked by another process: %w", path, err)
		}
		return nil, fmt.Errorf("store: %w", err)
	}
	if err := initSchema(guard.DB()); err != nil {
		guard.Close()
		return nil, fmt.Errorf("store: %s: %w", path, err)
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		guard.Close()
		return nil, fmt.Errorf("store: register metrics: %w", err)
	}
	s := &Store{
		cfg:     cfg,
		guard:   guard,
		db:      guard.DB(),
		log:     cfg.Logger,
		metrics: m,
		recent:  newRejectionLog(recentRejections),
	}
	if cfg.NoFencing {
		s.log.Error("FENCING DISABLED: this store accepts stale fencing tokens; use it only as a negative control",
			"data_dir", cfg.DataDir)
	}
	return s, nil
}

// initSchema creates the store's buckets in a new file and moves a version 1
// file to version 2, in one transaction: a crash leaves either layout whole.
func initSchema(db *bbolt.DB) error {
	return db.Update(func(tx *bbolt.Tx) error {
		for _, name := range [][]byte{bucketMeta, bucketObjects, bucketAudit} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return fmt.Errorf("create bucket %s: %w", name, err)
			}
		}
		meta := tx.Bucket(bucketMeta)
		v := meta.Get(keySchema)
		switch {
		case v == nil:
		case len(v) == 8 && binary.BigEndian.Uint64(v) == schemaVersion:
			return nil
		case len(v) == 8 && binary.BigEndian.Uint64(v) == 1:
			if err := migrateV1(tx); err != nil {
				return fmt.Errorf("move schema version 1 to %d: %w", schemaVersion, err)
			}
		default:
			return fmt.Errorf("unsupported schema version %x (want %d; a newer store wrote this file?)", v, schemaVersion)
		}
		return meta.Put(keySchema, u64(schemaVersion))
	})
}

// migrateV1 moves the highest tokens of a version 1 file into the guard's
// bucket. Values are copied as they are: one that is not a token makes the
// guard refuse writes of its scope, as it would have been refused before.
func migrateV1(tx *bbolt.Tx) error {
	old := tx.Bucket(bucketHighestV1)
	if old == nil {
		return nil
	}
	dst := tx.Bucket([]byte(fencebolt.Bucket))
	if dst == nil {
		return fmt.Errorf("bucket %s is missing", fencebolt.Bucket)
	}
	if err := old.ForEach(func(k, v []byte) error {
		if cur := dst.Get(k); cur != nil {
			return fmt.Errorf("scope %q has a token in both %s and %s", k, bucketHighestV1, fencebolt.Bucket)
		}
		return dst.Put(k, v)
	}); err != nil {
		return err
	}
	return tx.DeleteBucket(bucketHighestV1)
}

// Close closes the database. Requests in flight after Close fail.
func (s *Store) Close() error {
	if !s.closed.CompareAndSwap(false, true) {
		return nil
	}
	if err := s.guard.Close(); err != nil {
		return fmt.Errorf("store: close: %w", err)
	}
	return nil
}

// Put stores value under name if token is not stale for scope, and returns
// the audit record of the write. A stale token returns an error matching
// fence.ErrStaleToken (errors.As gives the *fence.StaleTokenError); token 0
// returns fence.ErrNoToken; a bad scope fence.ErrInvalidScope.
func (s *Store) Put(ctx context.Context, scope string, token uint64, name string, value []byte) (AuditRecord, error) {
	if int64(len(value)) > s.cfg.MaxValueBytes {
		return AuditRecord{}, fmt.Errorf("put %q: %w: %d bytes, limit %d", name, ErrTooLarge, len(value), s.cfg.MaxValueBytes)
	}
	rec, err := s.write(ctx, OpPut, scope, token, name, value)
	if err != nil {
		return AuditRecord{}, fmt.Errorf("put %q: %w", name, err)
	}
	return rec, nil
}

// Delete removes name if token is not stale for scope, and returns the audit
// record of the write. An absent object returns ErrNotFound and records
// nothing (the token is not raised). Errors are as for Put.
func (s *Store) Delete(ctx context.Context, scope string, token uint64, name string) (AuditRecord, error) {
	rec, err := s.write(ctx, OpDelete, scope, token, name, nil)
	if err != nil {
		return AuditRecord{}, fmt.Errorf("delete %q: %w", name, err)
	}
	return rec, nil
}

// write is the write path of Put and Delete. The guard's DoTx checks the
// token, runs apply and raises the highest token in one transaction; a
// stale token never reaches apply.
func (s *Store) write(ctx context.Context, op Op, scope string, token uint64, name string, value []byte) (AuditRecord, error) {
	if err := ValidateName(name); err != nil {
		return AuditRecord{}, err
	}
	if err := fence.Check(scope, token, 0); err != nil {
		return AuditRecord{}, err
	}
	if s.cfg.Verifier != nil {
		if err := s.cfg.Verifier.Verify(scope, token, fence.SignatureFrom(ctx)); err != nil {
			return AuditRecord{}, err
		}
	}
	if err := s.usable(ctx); err != nil {
		return AuditRecord{}, err
	}
	start := time.Now()

	// Highest tokens never decrease, so a token that is stale now stays
	// stale: rejecting it from a read transaction is exact, and keeps stale
	// writers from queueing behind bbolt's single writer. An unreadable
	// highest token refuses the write.
	highest, err := s.guard.Highest(ctx, scope)
	if err != nil {
		return AuditRecord{}, s.txError(err)
	}
	if err := fence.Check(scope, token, highest); err != nil && !s.cfg.NoFencing {
		s.rejectStale(ctx, op, name, err)
		return AuditRecord{}, err
	}

	var rec AuditRecord
	apply := func(tx *bbolt.Tx) (err error) {
		rec, err = s.apply(tx, op, scope, token, name, value, fence.OwnerFromContext(ctx), fence.SequenceFromContext(ctx))
		return err
	}
	err = s.guard.DoTx(ctx, scope, token, apply)
	if _, stale := errors.AsType[*fence.StaleTokenError](err); stale && s.cfg.NoFencing {
		// The negative control: apply the stale write anyway. Its token is
		// below the highest, which therefore stays as it is.
		err = s.db.Update(apply)
	}
	switch {
	case errors.Is(err, fence.ErrStaleToken):
		s.rejectStale(ctx, op, name, err)
		return AuditRecord{}, err
	case errors.Is(err, ErrNotFound):
		s.metrics.rejected.WithLabelValues(string(op), reasonNotFound).Inc()
		return AuditRecord{}, err
	case errors.Is(err, fence.ErrDuplicate):
		// Applied before under this sequence: not a stale rejection.
		s.metrics.rejected.WithLabelValues(string(op), reasonDuplicate).Inc()
		s.log.InfoContext(ctx, "duplicate write not applied again", "scope", scope, "token", token,
			"sequence", fence.SequenceFromContext(ctx), "object", name, "op", string(op))
		if s.cfg.Observer != nil {
			s.cfg.Observer.Observe(ctx, fence.Decision{Scope: scope, Presented: token, Highest: token,
				Sequence: fence.SequenceFromContext(ctx), Duplicate: true, Owner: fence.OwnerFromContext(ctx)})
		}
		return AuditRecord{}, err
	case errors.Is(err, fence.ErrSequenceGap):
		s.metrics.rejected.WithLabelValues(string(op), reasonSequenceGap).Inc()
		return AuditRecord{}, err
	case err != nil:
		return AuditRecord{}, s.txError(err)
	}
	s.accepted(ctx, rec, time.Since(start))
	return rec, nil
}

// apply writes the object and its audit record inside tx. The guard's token
// bucket, read here for HighestBefore, is not written: DoTx raises it.
func (s *Store) apply(tx *bbolt.Tx, op Op, scope string, token uint64, name string, value []byte, owner string, sequence uint64) (AuditRecord, error) {
	highest, err := s.guard.HighestTx(tx, scope)
	if err != nil {
		return AuditRecord{}, err
	}
	objects := tx.Bucket(bucketObjects)
	if op == OpDelete && objects.Get([]byte(name)) == nil {
		return AuditRecord{}, ErrNotFound // rolled back: the token is not raised
	}
	audit := tx.Bucket(bucketAudit)
	seq, err := audit.NextSequence()
	if err != nil {
		return AuditRecord{}, fmt.Errorf("next audit sequence: %w", err)
	}
	rec := AuditRecord{
		Seq:           seq,
		Scope:         scope,
		Token:         token,
		HighestBefore: highest,
		Object:        name,
		Op:            op,
		Time:          s.cfg.Now().UTC(),
		ValueLength:   int64(len(value)),
		Owner:         owner,
		Sequence:      sequence,
	}
	if op == OpPut {
		err = objects.Put([]byte(name), encodeObject(rec, value))
	} else {
		err = objects.Delete([]byte(name))
	}
	if err != nil {
		return AuditRecord{}, fmt.Errorf("%s object: %w", op, err)
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return AuditRecord{}, fmt.Errorf("encode audit record: %w", err)
	}
	if err := audit.Put(u64(seq), b); err != nil {
		return AuditRecord{}, fmt.Errorf("append audit record: %w", err)
	}
	return rec, nil
}

// txError reports a failed transaction, as ErrClosed once the store closed.
func (s *Store) txError(err error) error {
	if s.closed.Load() {
		return ErrClosed
	}
	return fmt.Errorf("transaction: %w", err)
}

func (s *Store) accepted(ctx context.Context, rec AuditRecord, took time.Duration) {
	s.metrics.accepted.WithLabelValues(string(rec.Op)).Inc()
	s.metrics.writeSeconds.Observe(took.Seconds())
	if rec.Stale() {
		s.metrics.staleAccepted.Inc()
		s.metrics.tokenGap.Observe(float64(rec.HighestBefore - rec.Token))
		s.log.WarnContext(ctx, "stale fencing token accepted because fencing is disabled",
			"scope", rec.Scope, "presented_token", rec.Token, "highest_token", rec.HighestBefore,
			"object", rec.Object, "op", string(rec.Op), "seq", rec.Seq, "owner", rec.Owner)
	} else {
		s.log.DebugContext(ctx, "write accepted",
			"scope", rec.Scope, "token", rec.Token, "object", rec.Object, "op", string(rec.Op), "seq", rec.Seq, "owner", rec.Owner)
	}
	if s.cfg.Observer != nil {
		s.cfg.Observer.Observe(ctx, fence.Decision{
			Scope: rec.Scope, Presented: rec.Token, Highest: rec.HighestBefore, Accepted: true, Owner: rec.Owner,
		})
	}
}

func (s *Store) rejectStale(ctx context.Context, op Op, name string, err error) {
	var st *fence.StaleTokenError
	if !errors.As(err, &st) {
		// Check found the input itself bad; write validates input first, so
		// this means a programming error rather than a fencing decision.
		s.log.ErrorContext(ctx, "unexpected fencing check result", "error", err)
		return
	}
	n := s.rejections.Add(1)
	owner := fence.OwnerFromContext(ctx)
	fenceprom.IncWithOwner(s.metrics.rejected.WithLabelValues(string(op), reasonStale), owner)
	s.metrics.tokenGap.Observe(float64(st.Highest - st.Presented))
	s.recent.add(Rejection{
		Time: s.cfg.Now().UTC(), Scope: st.Scope, Presented: st.Presented, Highest: st.Highest,
		Object: name, Op: op, Owner: owner,
	})
	s.log.WarnContext(ctx, "stale fencing token rejected",
		"scope", st.Scope, "presented_token", st.Presented, "highest_token", st.Highest,
		"rejections", n, "object", name, "op", string(op), "owner", owner)
	if s.cfg.Observer != nil {
		s.cfg.Observer.Observe(ctx, fence.Decision{
			Scope: st.Scope, Presented: st.Presented, Highest: st.Highest, Accepted: false, Owner: owner,
		})
	}
}

// Get returns the object stored under name, or ErrNotFound.
func (s *Store) Get(ctx context.Context, name string) (Object, error) {
	if err := ValidateName(name); err != nil {
		return Object{}, fmt.Errorf("get %q: %w", name, err)
	}
	if err := s.usable(ctx); err != nil {
		return Object{}, fmt.Errorf("get %q: %w", name, err)
	}
	var obj Object
	err := s.db.View(func(tx *bbolt.Tx) error {
		v := tx.Bucket(bucketObjects).Get([]byte(name))
		if v == nil {
			return ErrNotFound
		}
		var err error
		obj, err = decodeObject(name, v)
		return err
	})
	if err != nil {
		return Object{}, fmt.Errorf("get %q: %w", name, err)
	}
	return obj, nil
}

// Highest returns the highest token accepted for scope, 0 if none.
func (s *Store) Highest(ctx context.Context, scope string) (uint64, error) {
	if err := s.usable(ctx); err != nil {
		return 0, fmt.Errorf("highest %q: %w", scope, err)
	}
	h, err := s.guard.Highest(ctx, scope)
	if err != nil {
		return 0, fmt.Errorf("highest %q: %w", scope, err)
	}
	return h, nil
}

// Audit returns every audit record in commit order.
func (s *Store) Audit(ctx context.Context) ([]AuditRecord, error) {
	return s.AuditAfter(ctx, 0, 0)
}

// AuditAfter returns the audit records with Seq > after, in commit order, at
// most limit of them (limit <= 0: all).
func (s *Store) AuditAfter(ctx context.Context, after uint64, limit int) ([]AuditRecord, error) {
	if err := s.usable(ctx); err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	var out []AuditRecord
	err := s.db.View(func(tx *bbolt.Tx) error {
		c := tx.Bucket(bucketAudit).Cursor()
		for k, v := c.Seek(u64(after + 1)); k != nil; k, v = c.Next() {
			if limit > 0 && len(out) >= limit {
				break
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			var rec AuditRecord
			if err := json.Unmarshal(v, &rec); err != nil {
				return fmt.Errorf("decode audit record %d: %w", binary.BigEndian.Uint64(k), err)
			}
			out = append(out, rec)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	return out, nil
}

// Rejections returns the most recent stale rejections (up to 100), newest
// first. They are kept in memory only.
func (s *Store) Rejections() []Rejection { return s.recent.list() }

// RejectionCount returns the number of stale rejections since Open.
func (s *Store) RejectionCount() uint64 { return s.rejections.Load() }

func (s *Store) usable(ctx context.Context) error {
	if s.closed.Load() {
		return ErrClosed
	}
	return ctx.Err()
}

// ValidateName checks an object name against the rule of scopes and lease
// keys (fence.ValidateScope): 1..MaxNameBytes bytes of printable UTF-8.
// Errors match ErrInvalidName.
func ValidateName(name string) error {
	if se, ok := errors.AsType[*fence.ScopeError](fence.ValidateScope(name)); ok {
		return fmt.Errorf("%w: name %s", ErrInvalidName, se.Reason)
	}
	return nil
}

func u64(v uint64) []byte {
	return binary.BigEndian.AppendUint64(make([]byte, 0, 8), v)
}

// Object encoding: version byte, token, seq, modified (unix ns), scope length
// (uvarint), scope, value. Binary rather than JSON so values stay raw bytes.
const objectVersion = 1

func encodeObject(rec AuditRecord, value []byte) []byte {
	b := make([]byte, 0, 1+8+8+8+binary.MaxVarintLen64+len(rec.Scope)+len(value))
	b = append(b, objectVersion)
	b = binary.BigEndian.AppendUint64(b, rec.Token)
	b = binary.BigEndian.AppendUint64(b, rec.Seq)
	b = binary.BigEndian.AppendUint64(b, uint64(rec.Time.UnixNano()))
	b = binary.AppendUvarint(b, uint64(len(rec.Scope)))
	b = append(b, rec.Scope...)
	return append(b, value...)
}

func decodeObject(name string, b []byte) (Object, error) {
	bad := fmt.Errorf("corrupt object record (%d bytes)", len(b))
	if len(b) < 25 || b[0] != objectVersion {
		return Object{}, bad
	}
	obj := Object{
		Name:     name,
		Token:    binary.BigEndian.Uint64(b[1:9]),
		Seq:      binary.BigEndian.Uint64(b[9:17]),
		Modified: time.Unix(0, int64(binary.BigEndian.Uint64(b[17:25]))).UTC(),
	}
	rest := b[25:]
	n, w := binary.Uvarint(rest)
	if w <= 0 || uint64(len(rest)-w) < n {
		return Object{}, bad
	}
	rest = rest[w:]
	obj.Scope = string(rest[:n])
	// bbolt memory is valid only inside the transaction.
	obj.Value = append([]byte{}, rest[n:]...)
	return obj, nil
}
