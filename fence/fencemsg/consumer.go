package fencemsg

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencedio/fenced/fence"
)

// Outcome is what a consumer does with a message after Consumer.Apply.
type Outcome int

const (
	// Redeliver: nothing was decided or applied (the guard could not decide,
	// apply failed, or a strict guard found a sequence gap). Leave the
	// message to the broker to deliver again: nack it with requeue, or let
	// its ack deadline pass.
	Redeliver Outcome = iota
	// Applied: the token was current and apply's effect committed with it.
	// Ack the message.
	Applied
	// Stale: a message of a holder whose authority has passed to a newer
	// token. Nothing was applied; the guard's observer was told (a
	// fence/fencereport reporter tells fenced). Ack it: redelivering it can
	// never make it current.
	Stale
	// Duplicate: a message (or a re-sent copy of it) that was applied
	// already, found by its sequence. Nothing was applied again. Ack it.
	Duplicate
	// Refused: a message that no delivery can make acceptable: no token,
	// a malformed token, scope or sequence, a token above the guard's
	// range, a bad signature. Reject it without requeue (RabbitMQ then
	// dead-letters it if the queue has a dead-letter exchange; JetStream:
	// Term).
	Refused
)

var outcomeNames = [...]string{"redeliver", "applied", "stale", "duplicate", "refused"}

func (o Outcome) String() string {
	if o >= 0 && int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Done reports whether the message is finished with: Applied, Stale,
// Duplicate and Refused are; Redeliver is not.
func (o Outcome) Done() bool { return o != Redeliver }

// Config configures a Consumer.
type Config struct {
	// Guard keeps the highest token (and the last sequence) of each scope
	// and runs the consumer's side effect while it decides. Required. It
	// must commit apply's effect together with the token for the consumer
	// to apply each message at most once: fencesql's TxGuard() (apply
	// writes through fencesql.TxFromContext), fencenats's KV guard for the
	// scope's KV entry, or fence.NewMemory for an effect kept in the same
	// process memory. (A guard whose transactional form is not a
	// fence.Guard, such as fencebolt's DoTx, is called directly: see
	// Classify.) Its
	// Observer is told of every stale message: give it a
	// fence/fencereport reporter to tell fenced.
	Guard fence.Guard
}

// Validate checks the configuration; New calls it.
func (c Config) Validate() error {
	if c.Guard == nil {
		return errors.New("fencemsg: Config.Guard is required")
	}
	return nil
}

// Consumer applies fenced messages through a guard. It is safe for
// concurrent use; messages of one scope are serialized by the guard.
type Consumer struct {
	cfg Config
}

// New returns a Consumer.
func New(cfg Config) (*Consumer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Consumer{cfg: cfg}, nil
}

// Apply decides one message from its headers h: it reads the stamp
// (ReadStamp), then runs apply through the guard with the stamp's scope and
// token and its sequence, owner and signature in the context, so that apply
// runs only if the token is current for its scope, and its effect commits
// with the new highest token. It returns what to do with the message and
// the error behind any outcome but Applied:
//
//   - Applied, nil;
//   - Stale, a *fence.StaleTokenError (matches fence.ErrStaleToken);
//   - Duplicate, a *fence.DuplicateError (matches fence.ErrDuplicate);
//   - Refused, an error matching fence.ErrNoToken, ErrInvalidToken,
//     fence.ErrInvalidScope, fence.ErrInvalidSequence,
//     fence.ErrTokenOutOfRange or fence.ErrBadSignature;
//   - Redeliver, anything else: apply's error as is, the guard's failure,
//     or a *fence.SequenceGapError. An outcome matching
//     fence.ErrUnknownOutcome (a commit whose answer was lost) may have
//     been applied: with a sequence, its redelivery is then a Duplicate.
//
// apply must make its effect through the guard's transaction (for
// fencesql's TxGuard, fencesql.TxFromContext(ctx)); an effect outside it is
// not atomic with the token.
func (c *Consumer) Apply(ctx context.Context, h Header, apply func(ctx context.Context) error) (Outcome, error) {
	s, err := ReadStamp(h)
	if err != nil {
		return Refused, fmt.Errorf("fencemsg: %w", err)
	}
	return c.ApplyStamp(ctx, s, apply)
}

// ApplyStamp is Apply for a stamp read already.
func (c *Consumer) ApplyStamp(ctx context.Context, s Stamp, apply func(ctx context.Context) error) (Outcome, error) {
	err := c.cfg.Guard.Do(s.Context(ctx), s.Scope, s.Token, apply)
	return Classify(err), err
}

// Classify returns the outcome of a message whose guard call returned err
// (see Consumer.Apply). With it a consumer can call a guard's own
// transactional form instead of fence.Guard's Do:
//
//	s, err := fencemsg.ReadStamp(h) // Refused on error
//	err = boltGuard.DoTx(s.Context(ctx), s.Scope, s.Token, func(tx *bbolt.Tx) error { ... })
//	outcome := fencemsg.Classify(err)
func Classify(err error) Outcome {
	switch {
	case err == nil:
		return Applied
	case errors.Is(err, fence.ErrStaleToken):
		return Stale
	case errors.Is(err, fence.ErrDuplicate):
		return Duplicate
	case errors.Is(err, fence.ErrNoToken), errors.Is(err, ErrInvalidToken),
		errors.Is(err, fence.ErrInvalidScope), errors.Is(err, fence.ErrInvalidSequence),
		errors.Is(err, fence.ErrTokenOutOfRange), errors.Is(err, fence.ErrBadSignature):
		return Refused
	}
	return Redeliver
}
