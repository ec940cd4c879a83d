package fencemsg

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/internal/decimal"
)

// Header names of a fenced message: the names of the HTTP headers
// (package fencehttp), exact in case. Values are strings; the guard spec,
// section "Messages", has the layout.
const (
	HeaderScope     = "Fencing-Scope"
	HeaderToken     = "Fencing-Token"
	HeaderSequence  = "Fencing-Sequence"
	HeaderOwner     = "Fencing-Owner"
	HeaderSignature = "Fencing-Token-Signature"
)

// Names lists every header a Stamp writes, in the order above.
var Names = []string{HeaderScope, HeaderToken, HeaderSequence, HeaderOwner, HeaderSignature}

// ErrInvalidToken is matched by the refusal of a Fencing-Token that is
// present but not a token: not decimal digits, 0, or above 2^64-1. An
// absent or empty one matches fence.ErrNoToken instead.
var ErrInvalidToken = errors.New("invalid fencing token")

// Header is a message's headers as a consumer reads them: every value of a
// key, matched exactly (case-sensitive), nil when absent. nats.Header
// satisfies it; Map adapts a map[string]string; the fenceamqp package
// adapts an amqp091 table.
type Header interface {
	Values(key string) []string
}

// HeaderWriter is a message's headers as a producer writes them. Set
// replaces every value of key; Del removes key. nats.Header and Map
// satisfy it.
type HeaderWriter interface {
	Set(key, value string)
	Del(key string)
}

// Map is a HeaderWriter and Header over a map[string]string, for brokers
// whose headers are a plain map. Its zero value (nil) is a Header without
// keys; Set needs a non-nil map.
type Map map[string]string

// Values implements Header.
func (m Map) Values(key string) []string {
	if v, ok := m[key]; ok {
		return []string{v}
	}
	return nil
}

// Set implements HeaderWriter.
func (m Map) Set(key, value string) { m[key] = value }

// Del implements HeaderWriter.
func (m Map) Del(key string) { delete(m, key) }

var (
	_ Header       = Map(nil)
	_ HeaderWriter = Map(nil)
)

// Stamp is what a producer puts in a message's headers: the scope and
// token of its lease, and optionally the message's sequence under that
// token, the lease's owner and the token's signature.
type Stamp struct {
	Scope     string
	Token     uint64
	Sequence  uint64 // 0: none
	Owner     string // "": none; informational
	Signature string // "": none
}

// LeaseStamp returns the stamp of a message published under l now: l's key
// and token, its owner when it knows it (fence.Owned), its token signature
// when it has one, and the sequence of ctx (fence.WithSequence, fence.Retry),
// or else the next sequence of l when l comes from fence.Sequenced. Call it
// once per message, and publish a re-sent message with the same stamp.
func LeaseStamp(ctx context.Context, l fence.Lease) Stamp {
	ctx = fence.LeaseContext(ctx, l)
	s := Stamp{
		Scope:    l.Key(),
		Token:    l.Token(),
		Sequence: fence.SequenceFromContext(ctx),
		Owner:    fence.OwnerFromContext(ctx),
	}
	if sl, ok := l.(interface{ Signature() string }); ok {
		s.Signature = sl.Signature()
	}
	return s
}

// Write sets the stamp's headers in h, replacing any that were there, and
// deletes the optional ones the stamp does not have.
func (s Stamp) Write(h HeaderWriter) {
	h.Set(HeaderScope, s.Scope)
	h.Set(HeaderToken, strconv.FormatUint(s.Token, 10))
	set := func(key, v string) {
		if v == "" {
			h.Del(key)
			return
		}
		h.Set(key, v)
	}
	seq := ""
	if s.Sequence != 0 {
		seq = strconv.FormatUint(s.Sequence, 10)
	}
	set(HeaderSequence, seq)
	set(HeaderOwner, s.Owner)
	set(HeaderSignature, s.Signature)
}

// Context returns ctx carrying the stamp's sequence, owner and signature,
// as the guards read them (fence.WithSequence, fence.WithOwner,
// fence.WithSignature).
func (s Stamp) Context(ctx context.Context) context.Context {
	ctx = fence.WithSequence(ctx, s.Sequence)
	ctx = fence.WithOwner(ctx, s.Owner)
	if s.Signature != "" {
		ctx = fence.WithSignature(ctx, s.Signature)
	}
	return ctx
}

// ReadStamp reads and validates the stamp of a message. Errors match, in
// this order of checking, fence.ErrNoToken (no Fencing-Token, or an empty
// one), ErrInvalidToken, fence.ErrInvalidScope (missing or invalid scope)
// and fence.ErrInvalidSequence. A key given more than once is invalid; an
// invalid owner is dropped, not refused (it is informational).
func ReadStamp(h Header) (Stamp, error) {
	var s Stamp
	tok, err := single(h, HeaderToken)
	if err != nil {
		return s, fmt.Errorf("%w: %w", ErrInvalidToken, err)
	}
	if s.Token, err = parseToken(tok); err != nil {
		return s, err
	}
	scope, err := single(h, HeaderScope)
	if err != nil {
		return s, fmt.Errorf("%w: %w", fence.ErrInvalidScope, err)
	}
	if err := fence.ValidateScope(scope); err != nil {
		return s, err
	}
	s.Scope = scope
	if s.Sequence, err = parseSequence(h); err != nil {
		return s, err
	}
	if o := h.Values(HeaderOwner); len(o) == 1 && fence.ValidOwner(o[0]) {
		s.Owner = o[0]
	}
	if sig := h.Values(HeaderSignature); len(sig) == 1 {
		s.Signature = sig[0]
	}
	return s, nil
}

func parseToken(v string) (uint64, error) {
	if v == "" {
		return 0, fmt.Errorf("%s: %w", HeaderToken, fence.ErrNoToken)
	}
	t, reason, ok := decimal.Parse(v)
	if !ok {
		return 0, fmt.Errorf("%w: %s %s", ErrInvalidToken, quote(v), reason)
	}
	if t == 0 {
		return 0, fmt.Errorf("%w: 0 is never issued", ErrInvalidToken)
	}
	return t, nil
}

func parseSequence(h Header) (uint64, error) {
	vs := h.Values(HeaderSequence)
	switch {
	case len(vs) == 0:
		return 0, nil
	case len(vs) > 1:
		return 0, fmt.Errorf("%w: %s given %d times", fence.ErrInvalidSequence, HeaderSequence, len(vs))
	}
	v := vs[0]
	q, reason, ok := decimal.Parse(v)
	if !ok {
		return 0, fmt.Errorf("%w: %s %s", fence.ErrInvalidSequence, quote(v), reason)
	}
	if q == 0 || q > fence.MaxSequence {
		return 0, fmt.Errorf("%w: %s is not between 1 and %d", fence.ErrInvalidSequence, quote(v), uint64(fence.MaxSequence))
	}
	return q, nil
}

// single returns the only value of key, "" when absent.
func single(h Header, key string) (string, error) {
	vs := h.Values(key)
	switch len(vs) {
	case 0:
		return "", nil
	case 1:
		return vs[0], nil
	}
	return "", fmt.Errorf("%s given %d times", key, len(vs))
}

// quote keeps attacker-sized values out of error messages.
func quote(s string) string {
	const max = 40
	if len(s) > max {
		return strconv.Quote(s[:max]) + "..."
	}
	return strconv.Quote(s)
}
