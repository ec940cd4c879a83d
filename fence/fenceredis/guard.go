package fenceredis

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/fencedio/fenced/fence"
	"github.com/redis/go-redis/v9"
)

// DefaultPrefix starts the highest-token key of every scope unless
// Config.Prefix says otherwise.
const DefaultPrefix = "fence:"

// Config configures a Guard; a zero field means the default documented on
// it.
type Config struct {
	// Prefix starts the key that holds a scope's highest token:
	// Prefix + "{" + HashTag(scope) + "}:highest". It must not contain '{'
	// or '}', which would change the key's hash tag. Guards that protect
	// the same data must use the same Prefix. Default: DefaultPrefix.
	Prefix string

	// Observer, if not nil, is told of every accepted and every stale
	// mutation, after Redis has answered. Mutations that fail for other
	// reasons (invalid input, a key outside the scope, a script or network
	// error, an uncertain outcome) are not reported. Default: nil.
	Observer fence.Observer

	// TokenTTL, if positive, makes the highest-token key expire TokenTTL
	// after the last accepted mutation of its scope. Default: 0, never.
	//
	// Setting it breaks fencing for any scope idle for longer than TokenTTL:
	// once the key is gone, the guard has forgotten the highest token and
	// accepts every token again, including the stale ones it exists to
	// refuse. Set it only if every token still in circulation for a scope is
	// guaranteed to be at least as high as the forgotten one, or if the
	// data the scope protects expires sooner (then there is nothing left to
	// protect).
	TokenTTL time.Duration

	// ReplayWindow is how long Redis remembers the outcome of each call, so
	// that a copy of the call arriving later gets the first outcome back
	// instead of checking and applying the mutation again. go-redis re-sends
	// a command whose reply it lost (a connection cut after Redis ran the
	// script; MaxRetries, 3 by default), and without this memory the copy
	// would apply the mutation twice, or report a stale token for a
	// mutation that was applied. Every call also gives up (its context
	// ends) after half the window, so go-redis sends no copy once the
	// outcome may have been forgotten. Default: DefaultReplayWindow.
	//
	// Each call leaves one key of about 100 bytes plus its result in Redis
	// for the whole window: at 10,000 mutations a second, the default keeps
	// about 600,000 such keys.
	ReplayWindow time.Duration
	// Verifier, when set, refuses every mutation whose token's signature
	// (fence.SignatureFrom its context) it does not accept, before Redis is
	// asked anything (see fence.NewSignedGuard). Default: none, tokens are
	// not checked for signatures.
	Verifier *fence.Verifier
	// StrictSequences refuses a write whose sequence (fence.WithSequence)
	// under the current token is not the last one plus 1, with a
	// *fence.SequenceGapError. Default: any sequence above the last passes.
	StrictSequences bool
}

// DefaultReplayWindow is Config.ReplayWindow unless set otherwise.
const DefaultReplayWindow = time.Minute

// Validate reports whether c can be used, zero fields standing for their
// defaults; New calls it.
func (c Config) Validate() error {
	c = c.withDefaults()
	if strings.ContainsAny(c.Prefix, "{}") {
		return fmt.Errorf("fenceredis: prefix %q must not contain '{' or '}'", c.Prefix)
	}
	if c.TokenTTL < 0 {
		return fmt.Errorf("fenceredis: negative token TTL %v", c.TokenTTL)
	}
	if c.TokenTTL > 0 && c.TokenTTL < time.Millisecond {
		return fmt.Errorf("fenceredis: token TTL %v is below Redis's resolution of 1ms", c.TokenTTL)
	}
	if c.ReplayWindow < 2*time.Millisecond {
		return fmt.Errorf("fenceredis: replay window %v is below 2ms", c.ReplayWindow)
	}
	return nil
}

// withDefaults returns c with each zero field set to its default.
func (c Config) withDefaults() Config {
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.ReplayWindow == 0 {
		c.ReplayWindow = DefaultReplayWindow
	}
	return c
}

// Guard applies Redis mutations only for fencing tokens that are not stale.
// Each mutation is one Lua script that reads the scope's highest token,
// refuses a lower token, applies the mutation and records the token; Redis
// runs a script without interleaving any other command.
//
// A Guard is safe for concurrent use, and any number of Guards in any number
// of processes may share the same Redis: the serialization happens in Redis,
// not in the Guard.
//
// Guard does not implement fence.Guard: its Do runs an arbitrary Go
// function, which cannot be made atomic with a check that happens in Redis.
type Guard struct {
	client   redis.UniversalClient
	prefix   string
	observer fence.Observer
	ttlArg   string // ARGV[2] of the script
	window   time.Duration
	replay   string // ARGV[3] of the script
	verifier *fence.Verifier
	strict   string // ARGV[5] of the sequenced script
}

// New returns a Guard that keeps data and highest tokens in the Redis behind
// client. client may be a *redis.Client, a *redis.ClusterClient or a
// *redis.Ring (read the package documentation about Ring first).
func New(client redis.UniversalClient, cfg Config) (*Guard, error) {
	if client == nil {
		return nil, errors.New("fenceredis: nil client")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return &Guard{
		client:   client,
		prefix:   cfg.Prefix,
		observer: cfg.Observer,
		ttlArg:   strconv.FormatInt(cfg.TokenTTL.Milliseconds(), 10),
		window:   cfg.ReplayWindow,
		replay:   strconv.FormatInt(cfg.ReplayWindow.Milliseconds(), 10),
		verifier: cfg.Verifier,
		strict:   map[bool]string{false: "0", true: "1"}[cfg.StrictSequences],
	}, nil
}

// TokenKey returns the key that holds scope's highest token. Only the guard
// writes it; mutations refuse it as a data key.
func (g *Guard) TokenKey(scope string) string {
	return g.prefix + "{" + HashTag(scope) + "}:highest"
}

// SequenceKey returns the key that holds scope's last sequence and the token
// it was accepted under, "<token>:<sequence>". Only the guard writes it;
// mutations refuse it as a data key.
func (g *Guard) SequenceKey(scope string) string {
	return g.prefix + "{" + HashTag(scope) + "}:sequence"
}

// outcomeKey returns a new key, in scope's hash slot, under which the script
// stores the outcome of one call. The 128 random bits make it unique to the
// call, so that only copies of the same call find it.
func (g *Guard) outcomeKey(scope string) string {
	return g.prefix + "{" + HashTag(scope) + "}:call:" + rand.Text()
}

// Set sets key to value, like SET, if token is not stale for scope. ttl is
// the key's expiry: 0 for none (removing any expiry the key had, as SET
// does), redis.KeepTTL to keep the current one, or at least a millisecond.
// key must carry scope's hash tag (see Key).
func (g *Guard) Set(ctx context.Context, scope string, token uint64, key string, value any, ttl time.Duration) error {
	var mode string
	switch {
	case ttl == 0:
	case ttl == redis.KeepTTL:
		mode = "keep"
	case ttl >= time.Millisecond:
		mode = strconv.FormatInt(ttl.Milliseconds(), 10)
	default:
		return fmt.Errorf("fenceredis: set %q: ttl %v is neither 0, redis.KeepTTL nor at least 1ms", key, ttl)
	}
	_, err := g.run(ctx, "set", scope, token, setScript, []string{key}, value, mode)
	return err
}

// Del deletes keys, like DEL, if token is not stale for scope, and returns
// how many of them existed. At least one key is required; every key must
// carry scope's hash tag (see Key).
func (g *Guard) Del(ctx context.Context, scope string, token uint64, keys ...string) (int64, error) {
	if len(keys) == 0 {
		return 0, errors.New("fenceredis: del: no keys")
	}
	res, err := g.run(ctx, "del", scope, token, delScript, keys)
	if err != nil {
		return 0, err
	}
	n, ok := res.(int64)
	if !ok {
		return 0, fmt.Errorf("fenceredis: del scope %q: unexpected result %T", scope, res)
	}
	return n, nil
}

// HSet sets fields of the hash at key, like HSET, if token is not stale for
// scope, and returns how many fields were added (not counting fields that
// were updated). fieldValues are field, value pairs:
// HSet(ctx, scope, token, key, "status", "paid", "total", 42). key must carry
// scope's hash tag (see Key).
func (g *Guard) HSet(ctx context.Context, scope string, token uint64, key string, fieldValues ...any) (int64, error) {
	if len(fieldValues) == 0 || len(fieldValues)%2 != 0 {
		return 0, fmt.Errorf("fenceredis: hset %q: want field, value pairs, got %d arguments", key, len(fieldValues))
	}
	res, err := g.run(ctx, "hset", scope, token, hsetScript, []string{key}, fieldValues...)
	if err != nil {
		return 0, err
	}
	n, ok := res.(int64)
	if !ok {
		return 0, fmt.Errorf("fenceredis: hset scope %q: unexpected result %T", scope, res)
	}
	return n, nil
}

// Eval runs s with keys and args if token is not stale for scope, records
// the token, and returns what s returned, as go-redis decodes it (int64,
// string, []any, nil...). See Script for how KEYS, ARGV and TOKEN look
// inside the body. Every key must carry scope's hash tag (see Key); keys
// may be empty.
func (g *Guard) Eval(ctx context.Context, scope string, token uint64, s *Script, keys []string, args ...any) (any, error) {
	if s == nil {
		return nil, errors.New("fenceredis: eval: nil script")
	}
	return g.run(ctx, "eval", scope, token, s, keys, args...)
}

// Highest returns the highest token accepted for scope, 0 if none.
func (g *Guard) Highest(ctx context.Context, scope string) (uint64, error) {
	if err := fence.ValidateScope(scope); err != nil {
		return 0, err
	}
	v, err := g.client.Get(ctx, g.TokenKey(scope)).Result()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("fenceredis: highest of scope %q: %w", scope, err)
	}
	h, err := parseToken(v)
	if err != nil {
		return 0, fmt.Errorf("fenceredis: highest of scope %q: key %s: %w", scope, g.TokenKey(scope), err)
	}
	return h, nil
}

// run validates everything it can before talking to Redis, then runs s and
// reports the decision. A sequence in ctx runs s's sequenced script.
func (g *Guard) run(ctx context.Context, op, scope string, token uint64, s *Script, keys []string, args ...any) (any, error) {
	seq := fence.SequenceFromContext(ctx)
	if err := fence.CheckSequence(scope, token, seq, 0, 0, false); err != nil {
		return nil, err
	}
	if g.verifier != nil {
		if err := g.verifier.Verify(scope, token, fence.SignatureFrom(ctx)); err != nil {
			return nil, err
		}
	}
	tokenKey, seqKey := g.TokenKey(scope), g.SequenceKey(scope)
	if err := checkKeys(scope, HashTag(scope), tokenKey, seqKey, keys); err != nil {
		return nil, fmt.Errorf("fenceredis: %s: %w", op, err)
	}

	rs := s.rs
	allKeys := make([]string, 0, 3+len(keys))
	allKeys = append(allKeys, tokenKey, g.outcomeKey(scope))
	allArgs := make([]any, 0, 5+len(args))
	allArgs = append(allArgs, strconv.FormatUint(token, 10), g.ttlArg, g.replay)
	if seq != 0 {
		rs = s.seqRS
		allKeys = append(allKeys, seqKey)
		allArgs = append(allArgs, strconv.FormatUint(seq, 10), g.strict)
	}
	allKeys = append(allKeys, keys...)
	allArgs = append(allArgs, args...)

	// Every command go-redis sends for this call, retries included, leaves
	// before the deadline, so each copy of the call reaches Redis while the
	// first copy's outcome is remembered.
	callCtx, cancel := context.WithTimeout(ctx, g.window/2)
	defer cancel()
	// Run sends EVALSHA and falls back to EVAL when Redis answers NOSCRIPT
	// (after a restart, a failover or SCRIPT FLUSH).
	reply, err := rs.Run(callCtx, g.client, allKeys, allArgs...).Slice()
	if err != nil {
		var rerr redis.Error
		if errors.As(err, &rerr) {
			// Redis answered with an error: nothing was decided.
			return nil, fmt.Errorf("fenceredis: %s scope %q token %d: %w", op, scope, token, err)
		}
		// A network error or timeout leaves the outcome unknown: the script
		// may have run (once: copies sent by go-redis's retries get the
		// first outcome back).
		return nil, fmt.Errorf("fenceredis: %s scope %q token %d: %w: %w", op, scope, token, fence.ErrUnknownOutcome, err)
	}
	flag, highest, result, err := decodeReply(reply)
	if err != nil {
		return nil, fmt.Errorf("fenceredis: %s scope %q token %d: %w", op, scope, token, err)
	}
	d := fence.Decision{Scope: scope, Presented: token, Highest: highest, Accepted: flag == 1, Sequence: seq, Owner: fence.OwnerFromContext(ctx)}
	var refusal error
	switch flag {
	case 0:
		refusal = &fence.StaleTokenError{Scope: scope, Presented: token, Highest: highest}
	case 2:
		// The reply's second element is the last sequence, not a token.
		refusal = &fence.DuplicateError{Scope: scope, Token: token, Sequence: seq, Last: highest}
		d.Highest = token
	case 3:
		refusal = &fence.SequenceGapError{Scope: scope, Token: token, Sequence: seq, Last: highest}
		d.Highest = token
	}
	report := refusal == nil
	if refusal != nil {
		d, report, _ = fence.Rejected(d, refusal)
	}
	if report && g.observer != nil {
		g.observer.Observe(ctx, d)
	}
	if refusal != nil {
		return nil, refusal
	}
	return result, nil
}

// decodeReply returns the reply's flag (0 stale, 1 accepted, 2 duplicate, 3
// gap), its second element as a number (the highest token, or the last
// sequence for 2 and 3) and the body's result.
func decodeReply(reply []any) (flag int64, n uint64, result any, err error) {
	if len(reply) < 2 {
		return 0, 0, nil, fmt.Errorf("malformed script reply %v", reply)
	}
	flag, ok1 := reply[0].(int64)
	h, ok2 := reply[1].(string)
	if !ok1 || !ok2 || flag < 0 || flag > 3 {
		return 0, 0, nil, fmt.Errorf("malformed script reply %v", reply)
	}
	if h != "0" { // "0": the scope had no highest token (or sequence) yet
		if n, err = parseToken(h); err != nil {
			return 0, 0, nil, err
		}
	}
	if len(reply) > 2 {
		result = reply[2]
	}
	return flag, n, result, nil
}

func parseToken(s string) (uint64, error) {
	// Only the canonical form the script writes is a token; anything else
	// was written by someone else and cannot be trusted.
	t, err := strconv.ParseUint(s, 10, 64)
	if err != nil || t == 0 || strconv.FormatUint(t, 10) != s {
		return 0, fmt.Errorf("highest token %q is not a token written by a guard", s)
	}
	return t, nil
}
