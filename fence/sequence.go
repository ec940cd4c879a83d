package fence

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/fencedio/fenced/internal/failpoint"
)

// MaxSequence is the largest sequence a write may carry: sequences are kept
// in signed 64-bit columns by the SQL guards, so every guard takes the same
// range, 1 to 2^63-1.
const MaxSequence = math.MaxInt64

// ErrDuplicate is matched by the answer to a write whose sequence is at or
// below the last one accepted under its token: the write (or a retry of it)
// was already applied, and is not applied again. It is not a stale token:
// the lease is still held.
var ErrDuplicate = errors.New("duplicate fencing sequence")

// ErrSequenceGap is matched by the refusal of a write whose sequence skips
// ahead of last+1 under its token, by a guard with strict sequences. Nothing
// is applied or recorded; the lease is still held.
var ErrSequenceGap = errors.New("fencing sequence gap")

// ErrInvalidSequence is matched by the refusal of a sequence outside 1 to
// MaxSequence (or, on the wire, not decimal digits).
var ErrInvalidSequence = errors.New("invalid fencing sequence")

// ErrUnknownOutcome is matched by errors after which a write may or may not
// have been applied: a commit whose answer was lost, a Redis reply lost with
// its connection, a request cut after it was sent. Retry re-sends the same
// sequence after such an error.
var ErrUnknownOutcome = errors.New("outcome of the write is unknown")

// DuplicateError is the answer to a duplicate write. It matches ErrDuplicate.
type DuplicateError struct {
	Scope    string
	Token    uint64
	Sequence uint64 // the sequence that came with the write
	Last     uint64 // the last sequence accepted under Token
}

func (e *DuplicateError) Error() string {
	return fmt.Sprintf("duplicate write for scope %q: token %d sequence %d, last sequence accepted %d (already applied)",
		e.Scope, e.Token, e.Sequence, e.Last)
}

// Is makes errors.Is(err, ErrDuplicate) true.
func (e *DuplicateError) Is(target error) bool { return target == ErrDuplicate }

// SequenceGapError is a strict guard's refusal of a sequence other than
// Last+1. It matches ErrSequenceGap.
type SequenceGapError struct {
	Scope    string
	Token    uint64
	Sequence uint64
	Last     uint64
}

func (e *SequenceGapError) Error() string {
	return fmt.Sprintf("fencing sequence gap for scope %q: token %d sequence %d, expected %d",
		e.Scope, e.Token, e.Sequence, e.Last+1)
}

// Is makes errors.Is(err, ErrSequenceGap) true.
func (e *SequenceGapError) Is(target error) bool { return target == ErrSequenceGap }

// CheckSequence is Check for a write that may carry a sequence (seq 0: none).
// last is the last sequence accepted under highest (0 if none). It returns
// Check's errors, then for seq > 0 and token == highest a *DuplicateError
// when seq <= last, and with strict a *SequenceGapError when seq != last+1.
// A token above highest starts a new epoch: any sequence is accepted.
func CheckSequence(scope string, token, seq, highest, last uint64, strict bool) error {
	if err := Check(scope, token, highest); err != nil {
		return err
	}
	if seq > MaxSequence {
		return fmt.Errorf("%w: %d is above %d", ErrInvalidSequence, seq, uint64(MaxSequence))
	}
	if seq == 0 || token > highest {
		return nil
	}
	if seq < last || (seq == last && !failpoint.Enabled(failpoint.GuardReappliesEqualSequence)) {
		return &DuplicateError{Scope: scope, Token: token, Sequence: seq, Last: last}
	}
	if strict && seq != last+1 {
		return &SequenceGapError{Scope: scope, Token: token, Sequence: seq, Last: last}
	}
	return nil
}

// NextLast returns the last sequence to record after accepting a write with
// token and seq over highest and last: seq when it has one; otherwise 0 for
// a new epoch, last for the same one.
func NextLast(token, seq, highest, last uint64) uint64 {
	switch {
	case seq != 0:
		return seq
	case token > highest:
		return 0
	}
	return last
}

type sequenceKey struct{}

// WithSequence returns ctx carrying seq, the sequence of the write made with
// it (see the guard spec, "Retries and order within an epoch"). Every guard
// reads it in Do; the fencehttp and fenceconnect client halves send it as
// Fencing-Sequence. 0 removes it: the write carries no sequence.
func WithSequence(ctx context.Context, seq uint64) context.Context {
	return context.WithValue(ctx, sequenceKey{}, seq)
}

// SequenceFromContext returns the sequence WithSequence put in ctx, 0 if
// none.
func SequenceFromContext(ctx context.Context) uint64 {
	s, _ := ctx.Value(sequenceKey{}).(uint64)
	return s
}

// Sequencer is implemented by leases that number their writes
// (*client.Lease does): NextSequence returns 1 for the first call under a
// token, then 2, 3, ...
type Sequencer interface {
	NextSequence() uint64
}

// Retry makes write happen at most once: it takes the next sequence of l,
// runs write with it in the context (WithSequence), and while write fails
// with an error matching ErrUnknownOutcome, runs it again with the same
// sequence, at most attempts times in all. An answer matching ErrDuplicate
// means an earlier attempt was applied: Retry returns nil. Any other error
// is returned as is. write must send the sequence of its context (the
// guards' Do and the fencehttp/fenceconnect transports do).
func Retry(ctx context.Context, l Sequencer, attempts int, write func(ctx context.Context) error) error {
	if attempts < 1 {
		return fmt.Errorf("fence: Retry: %d attempts, need at least 1", attempts)
	}
	ctx = WithSequence(ctx, l.NextSequence())
	var err error
	for range attempts {
		err = write(ctx)
		switch {
		case err == nil, errors.Is(err, ErrDuplicate):
			return nil
		case !errors.Is(err, ErrUnknownOutcome):
			return err
		}
		if ctx.Err() != nil {
			return err
		}
	}
	return err
}

// Rejected completes d, the decision for a write that CheckSequence refused
// with err, and tells whether observers hear of it: stale tokens and
// duplicates are decisions (Duplicate set for the latter); other refusals
// (a gap, invalid input) are not reported. Guards use it so that all of them
// report the same way.
func Rejected(d Decision, err error) (Decision, bool, error) {
	d.Duplicate = errors.Is(err, ErrDuplicate)
	return d, d.Duplicate || errors.Is(err, ErrStaleToken), err
}
