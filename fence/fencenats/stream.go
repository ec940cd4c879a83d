package fencenats

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencemsg"
)

// ErrScopeMismatch is matched by the refusal to publish on a subject whose
// last message was published for another scope: tokens of different
// scopes are not comparable (invariant I6). Publish each subject under one
// scope.
var ErrScopeMismatch = errors.New("fencenats: subject written under another scope")

// ExpectedLastSubjectSequence is the JetStream header that makes a publish
// conditional on the stream sequence of the last message on its subject
// (0: no message on the subject).
const ExpectedLastSubjectSequence = "Nats-Expected-Last-Subject-Sequence"

// Stream is a guard over publishes to a JetStream stream: each subject is
// a log whose messages carry non-decreasing tokens of one scope. A publish
// reads the last message on its subject (its fencing headers give the
// highest token and the last sequence), decides (invariant I5, and the
// sequence rule), and publishes with Nats-Expected-Last-Subject-Sequence
// set to that message's stream sequence, so the stream stores it only if
// no message reached the subject in between: the check and the append are
// one atomic step. A publish that lost the race reads again and decides
// again.
//
// Stream is safe for concurrent use, also from many processes on one
// stream.
type Stream struct {
	s   jetstream.Stream
	js  jetstream.JetStream
	cfg Config
}

// NewStream returns a guard for publishes to stream s through js.
// Config.KeyPrefix is not used.
func NewStream(js jetstream.JetStream, s jetstream.Stream, cfg Config) (*Stream, error) {
	if js == nil || s == nil {
		return nil, errors.New("fencenats: nil JetStream or Stream")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Stream{s: s, js: js, cfg: cfg}, nil
}

// Last returns the fencing stamp and stream sequence of the last message on
// subject; a zero stamp and 0 when the subject has none.
func (g *Stream) Last(ctx context.Context, subject string) (fencemsg.Stamp, uint64, error) {
	m, err := g.s.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return fencemsg.Stamp{}, 0, nil
	}
	if err != nil {
		return fencemsg.Stamp{}, 0, fmt.Errorf("fencenats: last message on %q: %w", subject, err)
	}
	st, err := fencemsg.ReadStamp(m.Header)
	if err != nil {
		return fencemsg.Stamp{}, 0, fmt.Errorf("%w: message %d on %q: %w", ErrCorruptEntry, m.Sequence, subject, err)
	}
	return st, m.Sequence, nil
}

// Publish appends m to its subject (m.Subject) for scope under token, if
// token is not stale for the subject (and, with a sequence in ctx, the
// message is not a duplicate). It sets m's fencing headers (fencemsg's
// layout: scope, token, the sequence, owner and signature of ctx) and the
// expected last subject sequence, replacing any the caller set.
//
// Errors: a *fence.StaleTokenError, *fence.DuplicateError or
// *fence.SequenceGapError with nothing published; ErrScopeMismatch;
// ErrCorruptEntry (the subject's last message has no valid stamp);
// ErrContention; an error matching fence.ErrUnknownOutcome when the
// publish got no acknowledgement (it may be stored: re-send it with the
// same sequence, see fence.Retry, and a stored copy is then a duplicate).
func (g *Stream) Publish(ctx context.Context, scope string, token uint64, m *nats.Msg) (*jetstream.PubAck, error) {
	if err := fence.Check(scope, token, 0); err != nil {
		return nil, err
	}
	sig := fence.SignatureFrom(ctx)
	if g.cfg.Verifier != nil {
		if err := g.cfg.Verifier.Verify(scope, token, sig); err != nil {
			return nil, err
		}
	}
	seq := fence.SequenceFromContext(ctx)
	if m.Header == nil {
		m.Header = nats.Header{}
	}
	fencemsg.Stamp{Scope: scope, Token: token, Sequence: seq, Owner: fence.OwnerFromContext(ctx), Signature: sig}.Write(m.Header)
	for range g.cfg.attempts() {
		last, at, err := g.Last(ctx, m.Subject)
		if err != nil {
			return nil, err
		}
		if at != 0 && last.Scope != scope {
			return nil, fmt.Errorf("%w: %q has a message of scope %q, not %q", ErrScopeMismatch, m.Subject, last.Scope, scope)
		}
		lastSeq := last.Sequence
		if err := fence.CheckSequence(scope, token, seq, last.Token, lastSeq, g.cfg.StrictSequences); err != nil {
			refused(ctx, g.cfg.Observer, scope, token, seq, last.Token, err)
			return nil, err
		}
		m.Header.Set(ExpectedLastSubjectSequence, strconv.FormatUint(at, 10))
		ack, err := g.js.PublishMsg(ctx, m)
		if err == nil {
			observe(ctx, g.cfg.Observer, fence.Decision{Scope: scope, Presented: token, Highest: last.Token, Accepted: true, Sequence: seq})
			return ack, nil
		}
		var api *jetstream.APIError
		if errors.As(err, &api) {
			if api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant {
				continue // another publish won the race: decide again
			}
			return nil, fmt.Errorf("fencenats: publish to %q: %w", m.Subject, err)
		}
		return nil, fmt.Errorf("%w: fencenats: publish to %q token %d: %w", fence.ErrUnknownOutcome, m.Subject, token, err)
	}
	return nil, fmt.Errorf("%w: %q, %d attempts", ErrContention, m.Subject, g.cfg.attempts())
}

// PublishLease is Publish with the lease's key and token, its owner and
// signature, and its next sequence when l comes from fence.Sequenced; a
// stale rejection calls l.MarkLost (invariant I7).
func (g *Stream) PublishLease(ctx context.Context, l fence.Lease, m *nats.Msg) (*jetstream.PubAck, error) {
	ctx = fence.LeaseContext(ctx, l)
	if s, ok := l.(interface{ Signature() string }); ok && s.Signature() != "" && fence.SignatureFrom(ctx) == "" {
		ctx = fence.WithSignature(ctx, s.Signature())
	}
	ack, err := g.Publish(ctx, l.Key(), l.Token(), m)
	return ack, fence.ReportStale(l, err)
}

// Highest returns the token of the last message on subject, 0 if none.
func (g *Stream) Highest(ctx context.Context, subject string) (uint64, error) {
	st, _, err := g.Last(ctx, subject)
	return st.Token, err
}
