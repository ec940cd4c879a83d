package fencenats

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencedio/fenced/fence"
)

// ErrCorruptEntry is matched by the refusal to write over a KV entry or a
// stream message that a guard did not write (its value or headers do not
// follow the guard spec's layout). Nothing is written.
var ErrCorruptEntry = errors.New("fencenats: entry not written by a fencing guard")

// ErrContention is matched when a write lost its compare-and-set race
// Config.Attempts times in a row. Nothing of the last attempt was written;
// the token was not refused.
var ErrContention = errors.New("fencenats: too many concurrent writes to the scope")

// DefaultAttempts is the default of Config.Attempts.
const DefaultAttempts = 16

// Config configures a KV guard and a Stream guard.
type Config struct {
	// Observer, if set, is told of every decision: acceptances after the
	// write is stored, stale tokens and duplicates as they are found.
	// Default: none.
	Observer fence.Observer
	// Verifier, if set, refuses every write whose token's signature
	// (fence.SignatureFrom its context) it does not accept, before
	// anything is read (see fence.NewSignedGuard). Default: none.
	Verifier *fence.Verifier
	// StrictSequences refuses a write whose sequence (fence.WithSequence)
	// under the current token is not the last one plus 1, with a
	// *fence.SequenceGapError. Default: any sequence above the last passes.
	StrictSequences bool
	// Attempts bounds the compare-and-set rounds of one write: a round
	// lost to a concurrent writer reads the scope again and decides again.
	// Default DefaultAttempts.
	Attempts int
	// KeyPrefix is put before the encoded scope to make a KV key (see
	// Key). Default "": the key is the encoded scope. It must be made of
	// the characters of KV keys (A-Z a-z 0-9 - _ / = .), and not start
	// with ".".
	KeyPrefix string
}

// Validate checks the configuration; NewKV and NewStream call it.
func (c Config) Validate() error {
	if c.Attempts < 0 {
		return fmt.Errorf("fencenats: Attempts is %d, must not be negative", c.Attempts)
	}
	if c.KeyPrefix != "" && (strings.HasPrefix(c.KeyPrefix, ".") || strings.Contains(c.KeyPrefix, "..") ||
		strings.Trim(c.KeyPrefix, "-/_=.ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789") != "") {
		return fmt.Errorf("fencenats: KeyPrefix %q is not made of KV key characters", c.KeyPrefix)
	}
	return nil
}

func (c Config) attempts() int {
	if c.Attempts == 0 {
		return DefaultAttempts
	}
	return c.Attempts
}

// Key returns the KV key of scope: bytes A-Z a-z 0-9 "-" "_" "/" as they
// are, every other byte as "=" and its two upper-case hex digits. It is
// one-to-one, and never contains "." or a wildcard.
func Key(scope string) string {
	var b strings.Builder
	for i := 0; i < len(scope); i++ {
		c := scope[i]
		switch {
		case c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '_', c == '/':
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "=%02X", c)
		}
	}
	return b.String()
}

// Entry is a scope's KV entry: the data the guard protects, the highest
// token accepted for the scope and the last sequence accepted under it.
type Entry struct {
	Value    []byte
	Token    uint64 // 0: no entry
	Sequence uint64 // 0: none
	Revision uint64 // the KV revision; 0: no entry
}

// encode is the entry's value: "<token>:<sequence>\n" then the data.
func (e Entry) encode() []byte {
	head := strconv.FormatUint(e.Token, 10) + ":" + strconv.FormatUint(e.Sequence, 10) + "\n"
	return append([]byte(head), e.Value...)
}

func decode(key string, v []byte) (Entry, error) {
	head, data, ok := strings.Cut(string(v), "\n")
	tok, seq, ok2 := strings.Cut(head, ":")
	if !ok || !ok2 {
		return Entry{}, fmt.Errorf("%w: key %q has no token line", ErrCorruptEntry, key)
	}
	t, err := strconv.ParseUint(tok, 10, 64)
	if err != nil || t == 0 || tok[0] == '0' {
		return Entry{}, fmt.Errorf("%w: key %q holds token %q", ErrCorruptEntry, key, trim(tok))
	}
	q, err := strconv.ParseUint(seq, 10, 64)
	if err != nil || q > fence.MaxSequence || (len(seq) > 1 && seq[0] == '0') {
		return Entry{}, fmt.Errorf("%w: key %q holds sequence %q", ErrCorruptEntry, key, trim(seq))
	}
	return Entry{Value: []byte(data), Token: t, Sequence: q}, nil
}

func trim(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

// KV is a guard over a JetStream key-value bucket: each scope has one
// entry that holds its highest token, its last sequence and the data the
// token protects. A write reads the entry, decides (invariant I5, and the
// sequence rule), and stores the new entry with a compare-and-set on the
// revision it read (KV Update; Create for a new scope): the check and the
// write are one atomic step, and a write that lost the race to another
// reads again and decides again.
//
// KV is safe for concurrent use, also from many processes on one bucket.
type KV struct {
	kv  jetstream.KeyValue
	cfg Config
}

var _ fence.Guard = (*KV)(nil)

// NewKV returns a guard over kv, a bucket the caller made (any history and
// storage; for the token to be as durable as the data, both are the same
// entry).
func NewKV(kv jetstream.KeyValue, cfg Config) (*KV, error) {
	if kv == nil {
		return nil, errors.New("fencenats: nil KeyValue")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &KV{kv: kv, cfg: cfg}, nil
}

// Key returns the KV key of scope in g's bucket: Config.KeyPrefix and
// Key(scope).
func (g *KV) Key(scope string) string { return g.cfg.KeyPrefix + Key(scope) }

// Get returns scope's entry; an Entry with Revision 0 when the scope has
// none (never written, or deleted).
func (g *KV) Get(ctx context.Context, scope string) (Entry, error) {
	if err := fence.ValidateScope(scope); err != nil {
		return Entry{}, err
	}
	key := g.Key(scope)
	kve, err := g.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return Entry{}, nil
	}
	if err != nil {
		return Entry{}, fmt.Errorf("fencenats: get %q: %w", key, err)
	}
	e, err := decode(key, kve.Value())
	if err != nil {
		return Entry{}, err
	}
	e.Revision = kve.Revision()
	return e, nil
}

// Highest implements fence.Guard: the token of scope's entry, 0 if none.
func (g *KV) Highest(ctx context.Context, scope string) (uint64, error) {
	e, err := g.Get(ctx, scope)
	return e.Token, err
}

// Put stores value as scope's data if token is not stale (and, with a
// sequence in ctx, the write is not a duplicate), recording token as the
// highest. See Update.
func (g *KV) Put(ctx context.Context, scope string, token uint64, value []byte) error {
	return g.Update(ctx, scope, token, func([]byte) ([]byte, error) { return value, nil })
}

// Update is a read-modify-write of scope's data under token: it reads the
// entry, decides, calls fn with the current data (nil for a new scope)
// and stores what fn returns with token as the highest, if the entry has
// not changed since it was read. Otherwise it reads again, decides again
// and calls fn again, up to Config.Attempts times (then ErrContention):
// fn must have no effects of its own.
//
// Errors: a *fence.StaleTokenError, *fence.DuplicateError or
// *fence.SequenceGapError with nothing written; fn's error as is;
// ErrCorruptEntry; an error matching fence.ErrUnknownOutcome when the
// store request got no answer (it may have been stored: re-send it with
// the same sequence, see fence.Retry).
func (g *KV) Update(ctx context.Context, scope string, token uint64, fn func(value []byte) ([]byte, error)) error {
	if err := fence.Check(scope, token, 0); err != nil {
		return err
	}
	if g.cfg.Verifier != nil {
		if err := g.cfg.Verifier.Verify(scope, token, fence.SignatureFrom(ctx)); err != nil {
			return err
		}
	}
	seq := fence.SequenceFromContext(ctx)
	key := g.Key(scope)
	for range g.cfg.attempts() {
		cur, err := g.Get(ctx, scope)
		if err != nil {
			return err
		}
		if err := fence.CheckSequence(scope, token, seq, cur.Token, cur.Sequence, g.cfg.StrictSequences); err != nil {
			g.refused(ctx, scope, token, seq, cur.Token, err)
			return err
		}
		v, err := fn(cur.Value)
		if err != nil {
			return err
		}
		next := Entry{Value: v, Token: token, Sequence: fence.NextLast(token, seq, cur.Token, cur.Sequence)}
		if cur.Revision == 0 {
			_, err = g.kv.Create(ctx, key, next.encode())
		} else {
			_, err = g.kv.Update(ctx, key, next.encode(), cur.Revision)
		}
		switch {
		case err == nil:
			g.observe(ctx, fence.Decision{Scope: scope, Presented: token, Highest: cur.Token, Accepted: true, Sequence: seq})
			return nil
		case errors.Is(err, jetstream.ErrKeyRevisionMismatch), errors.Is(err, jetstream.ErrKeyExists):
			continue // another write won the race: decide again
		}
		var api *jetstream.APIError
		if errors.As(err, &api) {
			return fmt.Errorf("fencenats: store %q: %w", key, err)
		}
		return fmt.Errorf("%w: fencenats: store %q token %d: %w", fence.ErrUnknownOutcome, key, token, err)
	}
	return fmt.Errorf("%w: %q, %d attempts", ErrContention, scope, g.cfg.attempts())
}

type valueKey struct{}

type pending struct {
	old, new []byte
	set      bool
}

// Value returns the current data of the scope whose KV.Do call ctx belongs
// to (nil for a new scope, or outside Do).
func Value(ctx context.Context) []byte {
	if p, ok := ctx.Value(valueKey{}).(*pending); ok {
		return p.old
	}
	return nil
}

// SetValue sets the data that the KV.Do call ctx belongs to stores with
// the token. Without it, Do keeps the data and records only the token. It
// reports whether ctx belongs to such a call.
func SetValue(ctx context.Context, v []byte) bool {
	p, ok := ctx.Value(valueKey{}).(*pending)
	if ok {
		p.new, p.set = v, true
	}
	return ok
}

// Do implements fence.Guard for effects on the scope's own entry: apply
// reads the data with Value(ctx) and replaces it with SetValue(ctx, v);
// the data and the token are stored together by one compare-and-set. As
// in Update, apply may run more than once (a lost race runs it again on
// the new data), so it must have no effects of its own: an effect outside
// the entry is neither atomic with the token nor serialized with other
// writers of the scope. It is the guard to give fencemsg.Config when a
// message's effect is the scope's KV entry.
func (g *KV) Do(ctx context.Context, scope string, token uint64, apply func(ctx context.Context) error) error {
	return g.Update(ctx, scope, token, func(old []byte) ([]byte, error) {
		p := &pending{old: old}
		if err := apply(context.WithValue(ctx, valueKey{}, p)); err != nil {
			return nil, err
		}
		if p.set {
			return p.new, nil
		}
		return old, nil
	})
}

// DoLease is Do with the lease's key and token; a stale rejection calls
// l.MarkLost (fence.DoLease).
func (g *KV) DoLease(ctx context.Context, l fence.Lease, apply func(ctx context.Context) error) error {
	return fence.DoLease(ctx, g, l, apply)
}

func (g *KV) observe(ctx context.Context, d fence.Decision) {
	observe(ctx, g.cfg.Observer, d)
}

func (g *KV) refused(ctx context.Context, scope string, token, seq, highest uint64, err error) {
	refused(ctx, g.cfg.Observer, scope, token, seq, highest, err)
}

func observe(ctx context.Context, o fence.Observer, d fence.Decision) {
	if o == nil {
		return
	}
	d.Owner = fence.OwnerFromContext(ctx)
	o.Observe(ctx, d)
}

func refused(ctx context.Context, o fence.Observer, scope string, token, seq, highest uint64, err error) {
	if d, report, _ := fence.Rejected(fence.Decision{Scope: scope, Presented: token, Highest: highest, Sequence: seq}, err); report {
		observe(ctx, o, d)
	}
}
