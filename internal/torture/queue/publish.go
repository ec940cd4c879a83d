package queue

import (
	"context"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/fencedio/fenced/fence/fencemsg"
	"github.com/fencedio/fenced/fence/fencemsg/fenceamqp"
)

// Publisher publishes a worker's messages with publisher confirms. After a
// failed publish it connects again on the next one. It is not safe for
// concurrent use.
type Publisher struct {
	url  string
	conn *amqp.Connection
	ch   *amqp.Channel
}

// NewPublisher connects to the broker at url.
func NewPublisher(url string) (*Publisher, error) {
	p := &Publisher{url: url}
	if err := p.connect(); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *Publisher) connect() error {
	conn, err := amqp.Dial(p.url)
	if err != nil {
		return fmt.Errorf("queue: %w", err)
	}
	ch, err := conn.Channel()
	if err == nil {
		err = ch.Confirm(false)
	}
	if err != nil {
		conn.Close()
		return fmt.Errorf("queue: %w", err)
	}
	p.conn, p.ch = conn, ch
	return nil
}

// Send publishes body to queue with message ID id and the stamp s in its
// headers, and returns the confirmation to wait for. A resend of a
// message passes the same id and stamp. An error leaves the outcome
// unknown: the message may have left before the connection broke.
func (p *Publisher) Send(ctx context.Context, queue, id string, s fencemsg.Stamp, body []byte) (*amqp.DeferredConfirmation, error) {
	if p.ch == nil || p.ch.IsClosed() {
		p.Close()
		if err := p.connect(); err != nil {
			return nil, err
		}
	}
	msg := amqp.Publishing{Headers: amqp.Table{}, MessageId: id, Body: body, DeliveryMode: amqp.Persistent}
	s.Write(fenceamqp.Table(msg.Headers))
	dc, err := p.ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, false, false, msg)
	if err != nil {
		p.Close()
		return nil, fmt.Errorf("queue: publish: %w", err)
	}
	return dc, nil
}

// Close closes the connection.
func (p *Publisher) Close() {
	if p.conn != nil {
		p.conn.Close()
	}
	p.conn, p.ch = nil, nil
}
