// Package fenceamqp adapts package fencemsg to RabbitMQ through
// github.com/rabbitmq/amqp091-go: producers stamp a Publishing's headers
// with their lease (Stamp), consumers decide each Delivery with a
// fencemsg.Consumer and settle it (Handle).
//
// The fencing headers travel as AMQP table entries of type long string
// (Go string), named as in fencemsg (Fencing-Scope, Fencing-Token, ...),
// exactly as the guard spec's "Messages" section says. A fencing header of
// any other type is refused, never converted.
//
// Guarantees and non-guarantees are those of fencemsg. Handle settles a
// delivery after the guard's decision is final (after commit): a consumer
// that dies between the commit and the ack leaves the message to be
// redelivered, and with a sequence the copy is a Duplicate, acked without
// being applied again. Without a sequence it is applied again.
//
// A Redeliver outcome is nacked with requeue, and RabbitMQ has no delayed
// requeue: a message that keeps failing (a strict guard's gap waiting for
// an earlier message held by another consumer, a database that is down)
// comes back as fast as the consumer takes it. Keep a scope's messages in
// order (a single active consumer, prefetch 1) or bound the redeliveries
// (a quorum queue's x-delivery-limit with a dead-letter exchange).
package fenceamqp

import (
	"context"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencemsg"
)

// Table adapts an AMQP header table to fencemsg.Header and
// fencemsg.HeaderWriter. Values returns string values (and []byte, as
// text); Check refuses fencing headers of other types.
type Table amqp.Table

var (
	_ fencemsg.Header       = Table(nil)
	_ fencemsg.HeaderWriter = Table(nil)
)

// Values implements fencemsg.Header.
func (t Table) Values(key string) []string {
	switch v := t[key].(type) {
	case string:
		return []string{v}
	case []byte:
		return []string{string(v)}
	}
	return nil
}

// Set implements fencemsg.HeaderWriter.
func (t Table) Set(key, value string) { t[key] = value }

// Del implements fencemsg.HeaderWriter.
func (t Table) Del(key string) { delete(t, key) }

// Check returns an error matching fence.ErrInvalidScope,
// fencemsg.ErrInvalidToken or fence.ErrInvalidSequence when a fencing
// header of t is present with a type other than a string.
func (t Table) Check() error {
	for _, k := range fencemsg.Names {
		v, ok := t[k]
		if !ok {
			continue
		}
		switch v.(type) {
		case string, []byte:
			continue
		}
		var kind error
		switch k {
		case fencemsg.HeaderScope:
			kind = fence.ErrInvalidScope
		case fencemsg.HeaderToken:
			kind = fencemsg.ErrInvalidToken
		case fencemsg.HeaderSequence:
			kind = fence.ErrInvalidSequence
		default:
			continue // owner and signature: dropped, as when invalid
		}
		return fmt.Errorf("%w: header %s is a %T, not a string", kind, k, v)
	}
	return nil
}

// Stamp sets the fencing headers of a message published under l (see
// fencemsg.LeaseStamp) in p.Headers, making the table if needed, and
// returns the stamp. A message re-sent after an unknown outcome must carry
// the same stamp: publish the same Publishing again.
func Stamp(ctx context.Context, p *amqp.Publishing, l fence.Lease) fencemsg.Stamp {
	s := fencemsg.LeaseStamp(ctx, l)
	if p.Headers == nil {
		p.Headers = amqp.Table{}
	}
	s.Write(Table(p.Headers))
	return s
}

// Handle decides d with c (fencemsg.Consumer.Apply; apply gets d's
// context and makes its effect through the guard) and settles it:
// Applied, Stale and Duplicate are acked, Refused is rejected without
// requeue, Redeliver is nacked with requeue. It returns the outcome and
// the decision's error; an error settling d is joined to it (the broker
// then redelivers d when the channel closes, and the guard decides again).
// d must come from a channel without auto-ack.
func Handle(ctx context.Context, c *fencemsg.Consumer, d amqp.Delivery, apply func(ctx context.Context) error) (fencemsg.Outcome, error) {
	o, err := Decide(ctx, c, d.Headers, apply)
	if serr := Settle(d, o); serr != nil {
		if err == nil {
			return o, serr
		}
		return o, fmt.Errorf("%w; %w", err, serr)
	}
	return o, err
}

// Settle settles d by the outcome of its decision (guard spec section 8):
// Applied, Stale and Duplicate are acked, Refused is rejected without
// requeue, Redeliver is nacked with requeue.
func Settle(d amqp.Delivery, o fencemsg.Outcome) error {
	var err error
	switch o {
	case fencemsg.Applied, fencemsg.Stale, fencemsg.Duplicate:
		err = d.Ack(false)
	case fencemsg.Refused:
		err = d.Reject(false)
	default:
		err = d.Nack(false, true)
	}
	if err != nil {
		return fmt.Errorf("fenceamqp: settle delivery %d (%s): %w", d.DeliveryTag, o, err)
	}
	return nil
}

// Decide is Handle without settling: the outcome of a message with headers
// h, for consumers that ack on their own.
func Decide(ctx context.Context, c *fencemsg.Consumer, h amqp.Table, apply func(ctx context.Context) error) (fencemsg.Outcome, error) {
	if err := Table(h).Check(); err != nil {
		return fencemsg.Refused, fmt.Errorf("fenceamqp: %w", err)
	}
	return c.Apply(ctx, Table(h), apply)
}
