// Package queue is the torture's message path through RabbitMQ: the
// workers publish messages stamped with their lease (Publisher), a
// consumer process applies each delivery through fencemsg with a
// PostgreSQL guard (RunConsumer), and the harness declares, inspects and
// empties the run's queues (Admin).
//
// A run has two queues: the main queue, whose single active consumer takes
// one delivery at a time (prefetch 1, so that one token's messages reach
// it in order, as the guard spec's section 8 asks), and a delay queue,
// which holds every message for a fixed time and then dead-letters it to
// the main queue, in order: the messages of a lease published through it
// arrive behind those of later holders.
//
// # Guarantees
//
//   - The consumer records each decision (history.Delivery) after it is
//     final and before it settles the delivery, so a kill between the two
//     leaves both the record and a redelivery.
//   - A publish whose confirmation was not read is recorded as of unknown
//     outcome, never as failed.
//
// # Non-guarantees
//
//   - The broker itself is not faulted (not killed, not partitioned); its
//     clients are.
//   - It judges nothing: package check does.
package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/fencedio/fenced/fence/fencemsg"
	"github.com/fencedio/fenced/fence/fencemsg/fenceamqp"
	"github.com/fencedio/fenced/internal/torture/history"
)

// Names returns the main and delay queues of run runID.
func Names(runID string) (main, delay string) {
	return "torture-" + runID, "torture-" + runID + "-delay"
}

// Admin declares, inspects, empties and deletes a run's queues.
type Admin struct {
	conn        *amqp.Connection
	ch          *amqp.Channel
	Main, Delay string
}

// OpenAdmin connects to the broker at url and declares the queues: the
// delay queue holds each message for hold, then moves it to main.
func OpenAdmin(url, main, delay string, hold time.Duration) (*Admin, error) {
	conn, err := amqp.Dial(url)
	if err != nil {
		return nil, fmt.Errorf("queue: %w", err)
	}
	ch, err := conn.Channel()
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("queue: %w", err)
	}
	a := &Admin{conn: conn, ch: ch, Main: main, Delay: delay}
	_, err = ch.QueueDeclare(main, true, false, false, false, amqp.Table{"x-single-active-consumer": true})
	if err == nil {
		_, err = ch.QueueDeclare(delay, true, false, false, false, amqp.Table{
			"x-message-ttl":             hold.Milliseconds(),
			"x-dead-letter-exchange":    "",
			"x-dead-letter-routing-key": main,
		})
	}
	if err != nil {
		a.Close()
		return nil, fmt.Errorf("queue: declare: %w", err)
	}
	return a, nil
}

// Ready returns how many messages wait in the two queues, not counting
// those delivered and not yet settled.
func (a *Admin) Ready() (int, error) {
	n := 0
	for _, q := range []string{a.Main, a.Delay} {
		st, err := a.ch.QueueDeclarePassive(q, true, false, false, false, nil)
		if err != nil {
			return 0, fmt.Errorf("queue: inspect %s: %w", q, err)
		}
		n += st.Messages
	}
	return n, nil
}

// TakeLeft removes what is left in the two queues, until both are empty or
// ctx ends, and returns the messages' stamps.
func (a *Admin) TakeLeft(ctx context.Context) ([]history.QueuedMessage, error) {
	var out []history.QueuedMessage
	for _, q := range []string{a.Main, a.Delay} {
		for ctx.Err() == nil {
			d, ok, err := a.ch.Get(q, true)
			if err != nil {
				return out, fmt.Errorf("queue: get from %s: %w", q, err)
			}
			if !ok {
				break
			}
			m := history.QueuedMessage{Queue: q, MessageID: d.MessageId}
			if s, err := fencemsg.ReadStamp(fenceamqp.Table(d.Headers)); err == nil {
				m.Scope, m.Token, m.Sequence = s.Scope, s.Token, s.Sequence
			}
			out = append(out, m)
		}
	}
	return out, ctx.Err()
}

// Delete deletes the two queues.
func (a *Admin) Delete() error {
	var errs []error
	for _, q := range []string{a.Main, a.Delay} {
		if _, err := a.ch.QueueDelete(q, false, false, false); err != nil {
			errs = append(errs, fmt.Errorf("queue: delete %s: %w", q, err))
		}
	}
	return errors.Join(errs...)
}

// Close closes the connection.
func (a *Admin) Close() error { return a.conn.Close() }
