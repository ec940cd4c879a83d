package fenceamqp_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencemsg"
	"github.com/fencedio/fenced/fence/fencemsg/fenceamqp"
	"github.com/fencedio/fenced/internal/fencedtest"
	"github.com/fencedio/fenced/internal/msgtest"
	"github.com/fencedio/fenced/internal/testenv"
)

// TestHelperProcess is the producer and the consumers of
// TestFrozenProducerKilledConsumer, run as processes of their own. It does
// nothing in a normal test run.
func TestHelperProcess(t *testing.T) {
	role := os.Getenv(msgtest.HelperEnv)
	if role == "" {
		return
	}
	ctx := context.Background()
	url, queue := os.Getenv("FENCEMSG_AMQP"), os.Getenv("FENCEMSG_QUEUE")
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	in := bufio.NewScanner(os.Stdin)
	switch role {
	case "producer":
		// A: publishes a1..a4, stamps a5 and waits (the parent freezes it
		// here), then publishes a5 with its old token when told to.
		c, err := client.New(client.Config{Endpoint: os.Getenv("FENCEMSG_FENCED"), Owner: "A", TTL: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		lease, err := c.Acquire(ctx, os.Getenv("FENCEMSG_SCOPE"))
		if err != nil {
			t.Fatal(err)
		}
		l := fence.Sequenced(lease)
		if err := ch.Confirm(false); err != nil {
			t.Fatal(err)
		}
		send := func(id string, s fencemsg.Stamp) {
			p := amqp.Publishing{Headers: amqp.Table{}, MessageId: id, DeliveryMode: amqp.Persistent}
			s.Write(fenceamqp.Table(p.Headers))
			dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, p)
			if err != nil {
				t.Fatal(err)
			}
			if ok, err := dc.WaitContext(ctx); !ok || err != nil {
				t.Fatalf("publish %s: %v %v", id, ok, err)
			}
		}
		for _, id := range []string{"a1", "a2", "a3", "a4"} {
			send(id, fencemsg.LeaseStamp(ctx, l))
		}
		a5 := fencemsg.LeaseStamp(ctx, l)
		fmt.Printf("stamped %d\n", lease.Token())
		in.Scan()
		send("a5", a5)
		fmt.Println("published a5")
		in.Scan() // until the parent closes stdin
	case "consumer":
		// Applies what comes; after committing FENCEMSG_CRASH_AFTER it
		// stops acking and says so (the parent kills it then).
		scopes, effects := os.Getenv("FENCEMSG_SCOPES"), os.Getenv("FENCEMSG_EFFECTS")
		sink := msgtest.AttachSink(t, scopes, effects, func(d fence.Decision) {
			fmt.Println(msgtest.StaleLine(d))
		})
		if err := ch.Qos(10, 0, false); err != nil {
			t.Fatal(err)
		}
		deliveries, err := ch.Consume(queue, "", false, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		go func() { in.Scan(); os.Exit(0) }() // stdin closed: stop
		crashAfter := os.Getenv("FENCEMSG_CRASH_AFTER")
		for d := range deliveries {
			apply := sink.Apply(d.MessageId, fenceamqp.Table(d.Headers))
			if d.MessageId == crashAfter {
				o, err := fenceamqp.Decide(ctx, sink.Consumer, d.Headers, apply)
				fmt.Println(msgtest.OutcomeLine(d.MessageId, o, err))
				fmt.Println("committed, not acked")
				select {}
			}
			o, err := fenceamqp.Handle(ctx, sink.Consumer, d, apply)
			fmt.Println(msgtest.OutcomeLine(d.MessageId, o, err))
		}
	}
}

// TestFrozenProducerKilledConsumer is TestPausedProducer with real
// processes: the producer A is frozen with SIGSTOP past its TTL (its
// renewals stop with it) after it stamped a message, and a consumer is
// killed with SIGKILL between a commit and its ack.
func TestFrozenProducerKilledConsumer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	url := testenv.AMQPURL(t)
	sink := msgtest.NewSink(t)
	scopes, effects := sink.Tables()
	srv := fencedtest.Start(t)
	ctx := context.Background()

	admin := dial(t, url)
	queue := msgtest.Name("fencemsg-")
	if _, err := admin.ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.ch.QueueDelete(queue, false, false, false) })
	scope := "orders/" + msgtest.Name("")
	env := []string{"FENCEMSG_AMQP=" + url, "FENCEMSG_QUEUE=" + queue, "FENCEMSG_FENCED=" + srv.URL,
		"FENCEMSG_SCOPE=" + scope, "FENCEMSG_SCOPES=" + scopes, "FENCEMSG_EFFECTS=" + effects}
	record := sink.RecordLine

	// A stalled consumer (in this process) will hold a3 and a4 unacked.
	stalled := dial(t, url)
	d1 := stalled.consume(t, queue, 4)
	producer := msgtest.StartChild(t, "producer", env...)
	producer.Expect(t, "stamped", nil)
	handle := func(d amqp.Delivery) fencemsg.Outcome {
		o, err := fenceamqp.Handle(ctx, sink.Consumer, d, sink.Apply(d.MessageId, fenceamqp.Table(d.Headers)))
		if !o.Done() {
			t.Fatalf("%s: %v %v", d.MessageId, o, err)
		}
		sink.Record(d.MessageId, o)
		return o
	}
	for _, want := range []string{"a1", "a2"} {
		if m := next(t, d1); m.MessageId != want || handle(m) != fencemsg.Applied {
			t.Fatalf("stalled consumer: %s, want %s applied", m.MessageId, want)
		}
	}
	held := []amqp.Delivery{next(t, d1), next(t, d1)}
	if err := stalled.ch.Cancel(queue+"-consumer", false); err != nil {
		t.Fatal(err)
	}

	// A freezes with a5 stamped: no renewals; B gets the key after A's TTL.
	if err := producer.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	b := srv.Client(t, client.Config{Owner: "B"})
	leaseB, err := b.Acquire(ctx, scope, client.WithWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer leaseB.Release(ctx)
	lb := fence.Sequenced(leaseB)
	producerB := dial(t, url)
	if err := producerB.ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"b1", "b2", "b3", "b4", "b5"} {
		publish(t, producerB, queue, id, fencemsg.LeaseStamp(ctx, lb))
	}

	// A consumer process applies b1, b2, commits b3 and is killed before
	// its ack.
	c1 := msgtest.StartChild(t, "consumer", append(env, "FENCEMSG_CRASH_AFTER=b3")...)
	c1.Expect(t, "committed, not acked", record)
	if err := c1.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	c1.Cmd.Wait()

	// Its successor, the stalled consumer's end and A's thaw.
	c2 := msgtest.StartChild(t, "consumer", env...)
	stalled.c.Close()
	if err := producer.Cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(producer.In, "go")
	producer.Expect(t, "published a5", nil)
	want := map[string]fencemsg.Outcome{"b3": fencemsg.Duplicate, "b4": fencemsg.Applied, "b5": fencemsg.Applied,
		"a3": fencemsg.Stale, "a4": fencemsg.Stale, "a5": fencemsg.Stale}
	for len(want) > 0 {
		l := c2.Expect(t, "outcome", record)
		record(l)
		f := strings.Fields(l)
		o, _ := msgtest.ParseOutcome(f[2])
		if w, ok := want[f[1]]; ok && o == w {
			delete(want, f[1])
		} else if o != fencemsg.Redeliver {
			t.Fatalf("successor: %s, want %v", l, w)
		}
	}
	c2.Stop(record)
	producer.Stop(nil)

	if held[0].MessageId != "a3" || held[1].MessageId != "a4" {
		t.Fatalf("stalled consumer held %s, %s", held[0].MessageId, held[1].MessageId)
	}
	for _, id := range []string{"a1", "a2", "a3", "a4", "a5", "b1", "b2", "b3", "b4", "b5"} {
		t.Logf("%s: %v", id, sink.Outcomes(id))
	}
	sink.Check(t, []string{"a1", "a2", "b1", "b2", "b3", "b4", "b5"}, []string{"a3", "a4", "a5"}, "A")
	q, err := admin.ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if q.Messages != 0 {
		t.Errorf("%d messages left in the queue, want 0", q.Messages)
	}
}
