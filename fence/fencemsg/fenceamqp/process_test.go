package fenceamqp_test

import (
	"context"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencemsg"
	"github.com/fencedio/fenced/fence/fencemsg/fenceamqp"
	"github.com/fencedio/fenced/fence/fencereport"
	"github.com/fencedio/fenced/internal/fencedtest"
	"github.com/fencedio/fenced/internal/msgtest"
	"github.com/fencedio/fenced/internal/testenv"
)

// conn is one process's connection to RabbitMQ: closing it is that
// process crashing, and the broker requeues what it held unacked.
type conn struct {
	c  *amqp.Connection
	ch *amqp.Channel
}

func dial(t *testing.T, url string) *conn {
	t.Helper()
	c, err := amqp.Dial(url)
	if err != nil {
		t.Fatalf("dial RabbitMQ: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return &conn{c: c, ch: ch}
}

// consume starts a consumer without auto-ack that may hold prefetch
// deliveries unacked.
func (c *conn) consume(t *testing.T, queue string, prefetch int) <-chan amqp.Delivery {
	t.Helper()
	if err := c.ch.Qos(prefetch, 0, false); err != nil {
		t.Fatal(err)
	}
	d, err := c.ch.Consume(queue, queue+"-consumer", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func next(t *testing.T, d <-chan amqp.Delivery) amqp.Delivery {
	t.Helper()
	select {
	case m, ok := <-d:
		if !ok {
			t.Fatal("delivery channel closed")
		}
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery within 10s")
	}
	panic("unreachable")
}

// publish sends one message with publisher confirms, stamped as given.
func publish(t *testing.T, p *conn, queue, id string, s fencemsg.Stamp) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	msg := amqp.Publishing{Headers: amqp.Table{}, MessageId: id, Body: []byte(id), DeliveryMode: amqp.Persistent}
	s.Write(fenceamqp.Table(msg.Headers))
	dc, err := p.ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, msg)
	if err != nil {
		t.Fatalf("publish %s: %v", id, err)
	}
	if ok, err := dc.WaitContext(ctx); !ok || err != nil {
		t.Fatalf("publish %s: confirmed %v, %v", id, ok, err)
	}
}

// TestPausedProducer runs the timeline of a stale producer against the real
// RabbitMQ and PostgreSQL: A's messages sit in the queue, unacked by a
// stalled consumer, while A is paused past its TTL; B acquires and
// publishes; a consumer applies B's messages, crashes after a commit and
// before its ack, and its successor, once the stalled consumer dies too,
// refuses A's messages as stale. Every message of B is applied once, every
// message is settled, and fenced lists the stale messages that the
// consumer's guard reported, with both epochs' owners.
func TestPausedProducer(t *testing.T) {
	url := testenv.AMQPURL(t)
	srv := fencedtest.Start(t)
	ctx := context.Background()
	// The consumer's guard reports stale messages to fenced.
	fc := srv.Client(t, client.Config{})
	reporter, err := fencereport.New(fencereport.Config{Resource: "orders-consumer", Sender: fc, FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	sink := msgtest.NewSink(t, reporter)

	admin := dial(t, url)
	queue := msgtest.Name("fencemsg-")
	if _, err := admin.ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.ch.QueueDelete(queue, false, false, false) })

	a := srv.Client(t, client.Config{Owner: "A", TTL: 500 * time.Millisecond})
	b := srv.Client(t, client.Config{Owner: "B"})
	scope := "orders/" + msgtest.Name("")
	leaseA, err := a.Acquire(ctx, scope)
	if err != nil {
		t.Fatal(err)
	}
	la := fence.Sequenced(leaseA)
	producerA := dial(t, url)
	if err := producerA.ch.Confirm(false); err != nil {
		t.Fatal(err)
	}

	// A consumer that will stall: it takes A's four messages, applies two,
	// and holds the others unacked.
	stalled := dial(t, url)
	d1 := stalled.consume(t, queue, 10)
	for _, id := range []string{"a1", "a2", "a3", "a4"} {
		publish(t, producerA, queue, id, fencemsg.LeaseStamp(ctx, la))
	}
	// A stamps a5 with its token, then pauses before publishing it.
	a5 := fencemsg.LeaseStamp(ctx, la)
	handle := func(d amqp.Delivery) fencemsg.Outcome {
		t.Helper()
		o, err := fenceamqp.Handle(ctx, sink.Consumer, d, sink.Apply(d.MessageId, fenceamqp.Table(d.Headers)))
		if !o.Done() {
			t.Fatalf("message %s: %v, %v", d.MessageId, o, err)
		}
		sink.Record(d.MessageId, o)
		return o
	}
	for _, want := range []string{"a1", "a2"} {
		if m := next(t, d1); m.MessageId != want || handle(m) != fencemsg.Applied {
			t.Fatalf("stalled consumer: %s, want %s applied", m.MessageId, want)
		}
	}
	held := []amqp.Delivery{next(t, d1), next(t, d1)} // a3, a4: unacked
	// It stalls: it takes no more deliveries and still holds a3 and a4.
	if err := stalled.ch.Cancel(queue+"-consumer", false); err != nil {
		t.Fatal(err)
	}

	// A pauses: no renewals. The server expires its lease after the TTL
	// and B, waiting, gets the key with a higher token.
	leaseA.Orphan()
	leaseB, err := b.Acquire(ctx, scope, client.WithWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer leaseB.Release(ctx)
	if leaseB.Token() <= leaseA.Token() {
		t.Fatalf("B's token %d is not above A's %d", leaseB.Token(), leaseA.Token())
	}
	lb := fence.Sequenced(leaseB)
	producerB := dial(t, url)
	if err := producerB.ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	bs := []string{"b1", "b2", "b3", "b4", "b5"}
	for _, id := range bs {
		publish(t, producerB, queue, id, fenceamqp.Stamp(ctx, &amqp.Publishing{}, lb))
	}

	// A consumer applies b1..b3 and crashes after b3's commit, before its
	// ack; it holds b4 and b5 unacked.
	crashing := dial(t, url)
	d2 := crashing.consume(t, queue, 10)
	for _, want := range []string{"b1", "b2"} {
		if m := next(t, d2); m.MessageId != want || handle(m) != fencemsg.Applied {
			t.Fatalf("consumer: %s, want %s applied", m.MessageId, want)
		}
	}
	m := next(t, d2)
	o, err := fenceamqp.Decide(ctx, sink.Consumer, m.Headers, sink.Apply(m.MessageId, fenceamqp.Table(m.Headers)))
	if m.MessageId != "b3" || o != fencemsg.Applied {
		t.Fatalf("consumer: %s %v %v, want b3 applied", m.MessageId, o, err)
	}
	sink.Record(m.MessageId, o)
	next(t, d2) // b4, held
	crashing.c.Close()

	// Its successor gets b3 again (a duplicate), b4 and b5.
	successor := dial(t, url)
	d3 := successor.consume(t, queue, 10)
	for _, want := range []struct {
		id string
		o  fencemsg.Outcome
	}{{"b3", fencemsg.Duplicate}, {"b4", fencemsg.Applied}, {"b5", fencemsg.Applied}} {
		if m := next(t, d3); m.MessageId != want.id || handle(m) != want.o {
			t.Fatalf("successor: %s %v, want %s %v", m.MessageId, sink.Outcomes(m.MessageId), want.id, want.o)
		}
	}

	// The stalled consumer dies: RabbitMQ delivers A's messages again, and
	// A resumes and publishes a5 with its old token. All three are stale.
	if held[0].MessageId != "a3" || held[1].MessageId != "a4" {
		t.Fatalf("stalled consumer held %s, %s", held[0].MessageId, held[1].MessageId)
	}
	stalled.c.Close()
	publish(t, producerA, queue, "a5", a5)
	for _, want := range []string{"a3", "a4", "a5"} {
		if m := next(t, d3); m.MessageId != want || handle(m) != fencemsg.Stale {
			t.Fatalf("successor: %s %v, want %s stale", m.MessageId, sink.Outcomes(m.MessageId), want)
		}
	}

	sink.Check(t, []string{"a1", "a2", "b1", "b2", "b3", "b4", "b5"}, []string{"a3", "a4", "a5"}, "A")
	successor.ch.Close()
	q, err := admin.ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if q.Messages != 0 {
		t.Errorf("%d messages left in the queue, want 0 (every message settled)", q.Messages)
	}
	if h, err := sink.Guard.Highest(ctx, scope); err != nil || h != leaseB.Token() {
		t.Errorf("highest = %d, %v; want B's token %d", h, err, leaseB.Token())
	}

	// fenced shows the three stale messages as one rejection of A's epoch
	// by B's, at the consumer.
	if err := reporter.Close(ctx); err != nil {
		t.Fatal(err)
	}
	list, _, err := fc.ListRejections(ctx, scope, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Resource != "orders-consumer" || list[0].Count != 3 ||
		list[0].Presented != leaseA.Token() || list[0].PresentedOwner != "A" ||
		list[0].Highest != leaseB.Token() || list[0].HighestOwner != "B" {
		t.Errorf("fenced lists rejections %+v; want one of A's token %d by B's %d at orders-consumer, count 3", list, leaseA.Token(), leaseB.Token())
	}
}
