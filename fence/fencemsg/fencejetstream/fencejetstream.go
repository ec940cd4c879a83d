// Package fencejetstream adapts package fencemsg to NATS JetStream through
// github.com/nats-io/nats.go/jetstream: producers stamp a nats.Msg's
// headers with their lease (Stamp), consumers decide each jetstream.Msg
// with a fencemsg.Consumer and settle it (Handle).
//
// The fencing headers are NATS message headers named as in fencemsg
// (Fencing-Scope, Fencing-Token, ...), exact in case, one value each, as
// the guard spec's "Messages" section says.
//
// Guarantees and non-guarantees are those of fencemsg. Handle settles a
// message after the guard's decision is final (after commit): a consumer
// that dies between the commit and the ack leaves the message to be
// redelivered after the consumer's AckWait, and with a sequence the copy is
// a Duplicate, acked without being applied again. Without a sequence it is
// applied again.
package fencejetstream

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencemsg"
)

var _ fencemsg.HeaderWriter = nats.Header(nil)
var _ fencemsg.Header = nats.Header(nil)

// Stamp sets the fencing headers of a message published under l (see
// fencemsg.LeaseStamp) in m.Header, making it if needed, and returns the
// stamp. A message re-sent after an unknown outcome must carry the same
// stamp: publish the same nats.Msg again (with a Nats-Msg-Id, JetStream
// drops the copy within its duplicate window; if not, the consumer does).
func Stamp(ctx context.Context, m *nats.Msg, l fence.Lease) fencemsg.Stamp {
	s := fencemsg.LeaseStamp(ctx, l)
	if m.Header == nil {
		m.Header = nats.Header{}
	}
	s.Write(m.Header)
	return s
}

// Options tune Handle. The zero value is the default.
type Options struct {
	// RedeliverDelay is how long JetStream waits before it delivers again a
	// message whose outcome is Redeliver (NakWithDelay). Default 0: at once
	// (Nak), or as the consumer's BackOff says.
	RedeliverDelay time.Duration
}

// Handle decides m with c (fencemsg.Consumer.Apply on m.Headers(); apply
// makes its effect through the guard) and settles it: Applied, Stale and
// Duplicate are acked, Refused is terminated (Term: never delivered
// again), Redeliver is nacked. It returns the outcome and the decision's
// error; an error settling m is joined to it (JetStream then redelivers m
// after AckWait, and the guard decides again). m must come from a consumer
// with an explicit ack policy.
func Handle(ctx context.Context, c *fencemsg.Consumer, m jetstream.Msg, apply func(ctx context.Context) error, opts Options) (fencemsg.Outcome, error) {
	o, err := c.Apply(ctx, m.Headers(), apply)
	var serr error
	switch o {
	case fencemsg.Applied, fencemsg.Stale, fencemsg.Duplicate:
		serr = m.Ack()
	case fencemsg.Refused:
		serr = m.Term()
	default:
		if opts.RedeliverDelay > 0 {
			serr = m.NakWithDelay(opts.RedeliverDelay)
		} else {
			serr = m.Nak()
		}
	}
	if serr != nil {
		serr = fmt.Errorf("fencejetstream: settle message (%s): %w", o, serr)
		if err == nil {
			return o, serr
		}
		return o, fmt.Errorf("%w; %w", err, serr)
	}
	return o, err
}
