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
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/bbolt"

	"github.com/fencedio/fenced/fence"
)

// FileName is the name of the bbolt file inside Config.DataDir.
const FileName = "store.db"

// DefaultMaxValueBytes is the default limit on an object's value.
const DefaultMaxValueBytes = 1 << 20

// MaxNameBytes bounds object names, the same bound as lease keys and scopes.
const MaxNameBytes = 512

// openTimeout bounds the wait for bbolt's file lock, so that a second store
// on the same directory fails instead of hanging.
const openTimeout = 5 * time.Second

// schemaVersion is stored in the meta bucket; Open refuses other versions
// rather than misreading them.
const schemaVersion = 1

var (
	bucketMeta    = []byte("meta")
	bucketObjects = []byte("objects")
	bucketHighest = []byte("highest")
	bucketAudit   = []byte("audit")
	keySchema     = []byte("schema")
)

// ErrNotFound is returned for a read or delete of an object that does not
// exist.
var ErrNotFound = errors.New("object not found")

// ErrInvalidName is returned for an object name that is empty, longer than
// MaxNameBytes, not UTF-8, or contains control characters.
var ErrInvalidName = errors.New("invalid object name")

// ErrTooLarge is returned for a value longer than Config.MaxValueBytes.
var ErrTooLarge = errors.New("value too large")

// ErrClosed is returned by every operation after Close.
var ErrClosed = errors.New("store closed")

// Config configures a Store. The zero value of every field except DataDir
// is usable.
type Config struct {
	// DataDir holds the store's bbolt file (FileName). It is created if
	// missing. Required.
	DataDir string

	// NoFencing makes the store accept stale tokens: the scope and token
	// headers are still required and validated and every write is still
	// audited (with HighestBefore, so checkers can see stale overwrites), but
	// the comparison with the highest token is skipped. A negative control
	// for demos and torture tests only; Open logs a loud warning.
	NoFencing bool

	// MaxValueBytes limits the size of a value; larger PUTs get 413.
	// Default DefaultMaxValueBytes (1 MiB).
	MaxValueBytes int64

	// Logger receives stale rejections (Warn) and accepted writes (Debug).
	// Default slog.Default().
	Logger *slog.Logger

	// Registerer receives the fenced_store_* metrics. Default: a private
	// registry (with Go and process collectors) served on /metrics.
	Registerer prometheus.Registerer

	// Gatherer is what /metrics serves. Default: Registerer if it is also a
	// Gatherer (a *prometheus.Registry is), else nothing is served there.
	Gatherer prometheus.Gatherer

	// Observer, if set, is told of every stale rejection and every accepted
	// write, after commit and outside any lock.
	Observer fence.Observer

	// Now stamps audit records. Default time.Now.
	Now func() time.Time
}

// Validate reports whether the configuration can be used.
func (c *Config) Validate() error {
	if c.DataDir == "" {
		return errors.New("store: DataDir is required")
	}
	if c.MaxValueBytes < 0 {
		return fmt.Errorf("store: MaxValueBytes %d is negative", c.MaxValueBytes)
	}
	return nil
}

func (c *Config) setDefaults() {
	if c.MaxValueBytes == 0 {
		c.MaxValueBytes = DefaultMaxValueBytes
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Registerer == nil {
		reg := prometheus.NewRegistry()
		reg.MustRegister(
			prometheus.NewGoCollector(),
			prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}),
		)
		c.Registerer = reg
	}
	if c.Gatherer == nil {
		if g, ok := c.Registerer.(prometheus.Gatherer); ok {
			c.Gatherer = g
		}
	}
}

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
	db      *bbolt.DB
	log     *slog.Logger
	metrics *metrics
	recent  *rejectionLog
	closed  atomic.Bool

	rejections atomic.Uint64 // stale rejections since Open
}

// Open opens (creating if needed) the store in cfg.DataDir.
func Open(cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	if err := os.MkdirAll(cfg.DataDir, 0o750); err != nil {
		return nil, fmt.Errorf("store: create data dir: %w", err)
	}
	path := filepath.Join(cfg.DataDir, FileName)
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: openTimeout})
	if err != nil {
		if errors.Is(err, bbolt.ErrTimeout) {
			return nil, fmt.Errorf("store: open %s: locked by another process: %w", path, err)
		}
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	if err := initSchema(db); err != nil {
		db.Close()
		return nil, fmt.Errorf("store: %s: %w", path, err)
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("store: register metrics: %w", err)
	}
	s := &Store{
		cfg:     cfg,
		db:      db,
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

func initSchema(db *bbolt.DB) error {
	return db.Update(func(tx *bbolt.Tx) error {
		for _, name := range [][]byte{bucketMeta, bucketObjects, bucketHighest, bucketAudit} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return fmt.Errorf("create bucket %s: %w", name, err)
			}
		}
		meta := tx.Bucket(bucketMeta)
		if v := meta.Get(keySchema); v != nil {
			if len(v) != 8 || binary.BigEndian.Uint64(v) != schemaVersion {
				return fmt.Errorf("unsupported schema version %x (want %d)", v, schemaVersion)
			}
			return nil
		}
		return meta.Put(keySchema, u64(schemaVersion))
	})
}

// Close closes the database. Requests in flight after Close fail.
func (s *Store) Close() error {
	if !s.closed.CompareAndSwap(false, true) {
		return nil
	}
	if err := s.db.Close(); err != nil {
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

func (s *Store) write(ctx context.Context, op Op, scope string, token uint64, name string, value []byte) (AuditRecord, error) {
	if err := ValidateName(name); err != nil {
		return AuditRecord{}, err
	}
	if err := fence.ValidateScope(scope); err != nil {
		return AuditRecord{}, err
	}
	if token == 0 {
		return AuditRecord{}, fence.ErrNoToken
	}
	if err := s.usable(ctx); err != nil {
		return AuditRecord{}, err
	}
	start := time.Now()

	// Highest tokens never decrease, so a token that is stale now stays
	// stale: rejecting it from a read transaction is exact, and keeps stale
	// writers from queueing behind bbolt's single writer.
	if !s.cfg.NoFencing {
		var highest uint64
		if err := s.db.View(func(tx *bbolt.Tx) error {
			highest = readHighest(tx, scope)
			return nil
		}); err != nil {
			return AuditRecord{}, fmt.Errorf("read highest token: %w", err)
		}
		if err := fence.Check(scope, token, highest); err != nil {
			s.rejectStale(ctx, op, name, err)
			return AuditRecord{}, err
		}
	}

	var (
		rec      AuditRecord
		stale    error // set when the authoritative check rejects
		notFound bool
	)
	err := s.db.Update(func(tx *bbolt.Tx) error {
		highest := readHighest(tx, scope)
		if !s.cfg.NoFencing {
			if err := fence.Check(scope, token, highest); err != nil {
				stale = err
				return nil // nothing written; commit is a no-op
			}
		}
		objects := tx.Bucket(bucketObjects)
		if op == OpDelete && objects.Get([]byte(name)) == nil {
			notFound = true
			return nil
		}
		audit := tx.Bucket(bucketAudit)
		seq, err := audit.NextSequence()
		if err != nil {
			return fmt.Errorf("next audit sequence: %w", err)
		}
		rec = AuditRecord{
			Seq:           seq,
			Scope:         scope,
			Token:         token,
			HighestBefore: highest,
			Object:        name,
			Op:            op,
			Time:          s.cfg.Now().UTC(),
			ValueLength:   int64(len(value)),
		}
		switch op {
		case OpPut:
			if err := objects.Put([]byte(name), encodeObject(rec, value)); err != nil {
				return fmt.Errorf("write object: %w", err)
			}
		case OpDelete:
			if err := objects.Delete([]byte(name)); err != nil {
				return fmt.Errorf("delete object: %w", err)
			}
		}
		if token > highest {
			if err := tx.Bucket(bucketHighest).Put([]byte(scope), u64(token)); err != nil {
				return fmt.Errorf("raise highest token: %w", err)
			}
		}
		b, err := json.Marshal(rec)
		if err != nil {
			return fmt.Errorf("encode audit record: %w", err)
		}
		if err := audit.Put(u64(seq), b); err != nil {
			return fmt.Errorf("append audit record: %w", err)
		}
		return nil
	})
	if err != nil {
		if s.closed.Load() {
			return AuditRecord{}, ErrClosed
		}
		return AuditRecord{}, fmt.Errorf("transaction: %w", err)
	}
	if stale != nil {
		s.rejectStale(ctx, op, name, stale)
		return AuditRecord{}, stale
	}
	if notFound {
		s.metrics.rejected.WithLabelValues(string(op), reasonNotFound).Inc()
		return AuditRecord{}, ErrNotFound
	}
	s.accepted(ctx, rec, time.Since(start))
	return rec, nil
}

func (s *Store) accepted(ctx context.Context, rec AuditRecord, took time.Duration) {
	s.metrics.accepted.WithLabelValues(string(rec.Op)).Inc()
	s.metrics.writeSeconds.Observe(took.Seconds())
	if rec.Stale() {
		s.metrics.staleAccepted.Inc()
		s.metrics.tokenGap.Observe(float64(rec.HighestBefore - rec.Token))
		s.log.WarnContext(ctx, "stale fencing token accepted because fencing is disabled",
			"scope", rec.Scope, "presented_token", rec.Token, "highest_token", rec.HighestBefore,
			"object", rec.Object, "op", string(rec.Op), "seq", rec.Seq)
	} else {
		s.log.DebugContext(ctx, "write accepted",
			"scope", rec.Scope, "token", rec.Token, "object", rec.Object, "op", string(rec.Op), "seq", rec.Seq)
	}
	if s.cfg.Observer != nil {
		s.cfg.Observer.Observe(ctx, fence.Decision{
			Scope: rec.Scope, Presented: rec.Token, Highest: rec.HighestBefore, Accepted: true,
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
	s.metrics.rejected.WithLabelValues(string(op), reasonStale).Inc()
	s.metrics.tokenGap.Observe(float64(st.Highest - st.Presented))
	s.recent.add(Rejection{
		Time: s.cfg.Now().UTC(), Scope: st.Scope, Presented: st.Presented, Highest: st.Highest,
		Object: name, Op: op,
	})
	s.log.WarnContext(ctx, "stale fencing token rejected",
		"scope", st.Scope, "presented_token", st.Presented, "highest_token", st.Highest,
		"rejections", n, "object", name, "op", string(op))
	if s.cfg.Observer != nil {
		s.cfg.Observer.Observe(ctx, fence.Decision{
			Scope: st.Scope, Presented: st.Presented, Highest: st.Highest, Accepted: false,
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
	var h uint64
	err := s.db.View(func(tx *bbolt.Tx) error {
		h = readHighest(tx, scope)
		return nil
	})
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

// ValidateName checks an object name: 1..MaxNameBytes bytes of UTF-8 without
// control characters.
func ValidateName(name string) error {
	if err := validText(name); err != nil {
		return fmt.Errorf("%w: %s", ErrInvalidName, err)
	}
	return nil
}

func validText(s string) error {
	switch {
	case s == "":
		return errors.New("empty")
	case len(s) > MaxNameBytes:
		return fmt.Errorf("%d bytes, limit %d", len(s), MaxNameBytes)
	case !utf8.ValidString(s):
		return errors.New("not valid UTF-8")
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return fmt.Errorf("control character %U", r)
		}
	}
	return nil
}

func readHighest(tx *bbolt.Tx, scope string) uint64 {
	v := tx.Bucket(bucketHighest).Get([]byte(scope))
	if len(v) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(v)
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
