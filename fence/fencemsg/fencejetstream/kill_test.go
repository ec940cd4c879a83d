package fencejetstream_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencemsg"
	"github.com/fencedio/fenced/fence/fencemsg/fencejetstream"
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
	_, js := connect(t, os.Getenv("FENCEMSG_NATS"))
	stream, subject := os.Getenv("FENCEMSG_STREAM"), os.Getenv("FENCEMSG_SUBJECT")
	in := bufio.NewScanner(os.Stdin)
	switch role {
	case "producer":
		c, err := client.New(client.Config{Endpoint: os.Getenv("FENCEMSG_FENCED"), Owner: "A", TTL: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		lease, err := c.Acquire(ctx, os.Getenv("FENCEMSG_SCOPE"))
		if err != nil {
			t.Fatal(err)
		}
		l := fence.Sequenced(lease)
		send := func(id string, s fencemsg.Stamp) {
			m := &nats.Msg{Subject: subject, Data: []byte(id), Header: nats.Header{}}
			s.Write(m.Header)
			if _, err := js.PublishMsg(ctx, m); err != nil {
				t.Fatalf("publish %s: %v", id, err)
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
		in.Scan()
	case "consumer":
		scopes, effects := os.Getenv("FENCEMSG_SCOPES"), os.Getenv("FENCEMSG_EFFECTS")
		sink := msgtest.AttachSink(t, scopes, effects, func(d fence.Decision) { fmt.Println(msgtest.StaleLine(d)) })
		cons, err := js.Consumer(ctx, stream, "consumer")
		if err != nil {
			t.Fatal(err)
		}
		go func() { in.Scan(); os.Exit(0) }()
		crashAfter := os.Getenv("FENCEMSG_CRASH_AFTER")
		for {
			batch, err := cons.Fetch(1, jetstream.FetchMaxWait(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			for m := range batch.Messages() {
				apply := sink.Apply(id(m), m.Headers())
				if id(m) == crashAfter {
					o, err := sink.Consumer.Apply(ctx, m.Headers(), apply)
					fmt.Println(msgtest.OutcomeLine(id(m), o, err))
					fmt.Println("committed, not acked")
					select {}
				}
				o, err := fencejetstream.Handle(ctx, sink.Consumer, m, apply, fencejetstream.Options{RedeliverDelay: 200 * time.Millisecond})
				fmt.Println(msgtest.OutcomeLine(id(m), o, err))
			}
		}
	}
}

// TestFrozenProducerKilledConsumer is TestPausedProducer with real
// processes: the producer A is frozen with SIGSTOP past its TTL (its
// renewals stop with it) after it stamped a message, and a consumer is
// killed with SIGKILL between a commit and its ack. The consumers fetch one
// message at a time, so B's b4 and b5 reach the successor before the killed
// consumer's b3 comes back after AckWait: b3 was committed, so they follow
// it in sequence, and b3's redelivery is a duplicate.
func TestFrozenProducerKilledConsumer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	url := testenv.NATSURL(t)
	sink := msgtest.NewSink(t)
	scopes, effects := sink.Tables()
	srv := fencedtest.Start(t)
	ctx := context.Background()

	_, admin := connect(t, url)
	stream := msgtest.Name("FENCEMSG_")
	subject := "fencemsg." + stream
	if _, err := admin.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{subject}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.DeleteStream(context.Background(), stream) })
	if _, err := admin.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
		Durable: "consumer", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 5 * time.Second, MaxAckPending: 100,
	}); err != nil {
		t.Fatal(err)
	}
	scope := "orders/" + msgtest.Name("")
	env := []string{"FENCEMSG_NATS=" + url, "FENCEMSG_STREAM=" + stream, "FENCEMSG_SUBJECT=" + subject,
		"FENCEMSG_FENCED=" + srv.URL, "FENCEMSG_SCOPE=" + scope, "FENCEMSG_SCOPES=" + scopes, "FENCEMSG_EFFECTS=" + effects}
	record := sink.RecordLine

	producer := msgtest.StartChild(t, "producer", env...)
	producer.Expect(t, "stamped", nil)
	// A stalled consumer (in this process) takes A's four messages,
	// applies two and holds a3 and a4 unacked.
	stalledConn, stalled := connect(t, url)
	held := fetch(t, stalled, stream, "consumer", 4)
	for i, m := range held {
		if want := fmt.Sprintf("a%d", i+1); id(m) != want {
			t.Fatalf("stalled consumer got %s, want %s", id(m), want)
		}
		if i < 2 {
			o, err := fencejetstream.Handle(ctx, sink.Consumer, m, sink.Apply(id(m), m.Headers()), fencejetstream.Options{})
			if o != fencemsg.Applied {
				t.Fatalf("%s: %v %v", id(m), o, err)
			}
			sink.Record(id(m), o)
		}
	}

	// A freezes with a5 stamped; B gets the key after A's TTL.
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
	for _, body := range []string{"b1", "b2", "b3", "b4", "b5"} {
		m := &nats.Msg{Subject: subject, Data: []byte(body)}
		fencejetstream.Stamp(ctx, m, lb)
		if _, err := admin.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}

	// A consumer process applies b1, b2, commits b3 and is killed before
	// its ack.
	c1 := msgtest.StartChild(t, "consumer", append(env, "FENCEMSG_CRASH_AFTER=b3")...)
	c1.Expect(t, "committed, not acked", record)
	if err := c1.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	c1.Cmd.Wait()

	// Its successor; the stalled consumer's end; A thaws and publishes a5.
	c2 := msgtest.StartChild(t, "consumer", env...)
	stalledConn.Close()
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

	for _, id := range []string{"a1", "a2", "a3", "a4", "a5", "b1", "b2", "b3", "b4", "b5"} {
		t.Logf("%s: %v", id, sink.Outcomes(id))
	}
	sink.Check(t, []string{"a1", "a2", "b1", "b2", "b3", "b4", "b5"}, []string{"a3", "a4", "a5"}, "A")
	c, err := admin.Consumer(ctx, stream, "consumer")
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.NumPending != 0 || info.NumAckPending != 0 {
		t.Errorf("consumer has %d messages pending and %d unacked, want 0", info.NumPending, info.NumAckPending)
	}
	if h, err := sink.Guard.Highest(ctx, scope); err != nil || h != leaseB.Token() {
		t.Errorf("highest = %d, %v; want B's token %d", h, err, leaseB.Token())
	}
}
