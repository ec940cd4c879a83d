package fencejetstream_test

import (
	"context"
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

// connect is one process's connection to NATS: closing it is that process
// crashing; JetStream delivers what it held unacked again after AckWait.
func connect(t *testing.T, url string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatalf("connect NATS: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

const ackWait = 3 * time.Second

// fetch takes n messages from the durable consumer with js.
func fetch(t *testing.T, js jetstream.JetStream, stream, durable string, n int) []jetstream.Msg {
	t.Helper()
	ctx := context.Background()
	c, err := js.Consumer(ctx, stream, durable)
	if err != nil {
		t.Fatal(err)
	}
	var out []jetstream.Msg
	deadline := time.Now().Add(20 * time.Second)
	for len(out) < n && time.Now().Before(deadline) {
		batch, err := c.Fetch(n-len(out), jetstream.FetchMaxWait(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			out = append(out, m)
		}
	}
	if len(out) < n {
		t.Fatalf("fetched %d messages, want %d", len(out), n)
	}
	return out
}

func id(m jetstream.Msg) string { return string(m.Data()) }

// TestPausedProducer runs the timeline of a stale producer against the real
// NATS JetStream and PostgreSQL: A's messages sit in the stream, fetched
// and unacked by a stalled consumer, while A is paused past its TTL; B
// acquires and publishes; a consumer applies B's messages and crashes after
// a commit and before its ack; after AckWait JetStream delivers the unacked
// messages again and A's are refused as stale, as is the one A publishes
// when it resumes. Every message of B is applied once, and every message
// is settled.
func TestPausedProducer(t *testing.T) {
	url := testenv.NATSURL(t)
	sink := msgtest.NewSink(t)
	srv := fencedtest.Start(t)
	ctx := context.Background()

	_, admin := connect(t, url)
	stream := msgtest.Name("FENCEMSG_")
	subject := "fencemsg." + stream
	if _, err := admin.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{subject}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.DeleteStream(context.Background(), stream) })
	durable := "consumer"
	if _, err := admin.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
		Durable: durable, AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait, MaxAckPending: 100,
	}); err != nil {
		t.Fatal(err)
	}

	a := srv.Client(t, client.Config{Owner: "A", TTL: 500 * time.Millisecond})
	b := srv.Client(t, client.Config{Owner: "B"})
	scope := "orders/" + msgtest.Name("")
	leaseA, err := a.Acquire(ctx, scope)
	if err != nil {
		t.Fatal(err)
	}
	la := fence.Sequenced(leaseA)
	_, producerA := connect(t, url)
	publish := func(js jetstream.JetStream, body string, s fencemsg.Stamp) {
		t.Helper()
		m := &nats.Msg{Subject: subject, Data: []byte(body), Header: nats.Header{}}
		s.Write(m.Header)
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatalf("publish %s: %v", body, err)
		}
	}
	for _, id := range []string{"a1", "a2", "a3", "a4"} {
		publish(producerA, id, fencemsg.LeaseStamp(ctx, la))
	}
	a5 := fencemsg.LeaseStamp(ctx, la) // stamped, then A pauses before publishing

	handle := func(m jetstream.Msg) fencemsg.Outcome {
		t.Helper()
		o, err := fencejetstream.Handle(ctx, sink.Consumer, m, sink.Apply(id(m), m.Headers()), fencejetstream.Options{})
		if o == fencemsg.Refused {
			t.Fatalf("message %s: %v, %v", id(m), o, err)
		}
		sink.Record(id(m), o)
		return o
	}

	// A consumer that will stall takes A's four messages, applies two and
	// holds the others unacked.
	stalledConn, stalled := connect(t, url)
	held := fetch(t, stalled, stream, durable, 4)
	for i, want := range []string{"a1", "a2", "a3", "a4"} {
		if id(held[i]) != want {
			t.Fatalf("stalled consumer got %s, want %s", id(held[i]), want)
		}
	}
	for _, m := range held[:2] {
		if o := handle(m); o != fencemsg.Applied {
			t.Fatalf("%s: %v, want applied", id(m), o)
		}
	}

	// A pauses: no renewals; B gets the key after A's TTL.
	leaseA.Orphan()
	leaseB, err := b.Acquire(ctx, scope, client.WithWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer leaseB.Release(ctx)
	lb := fence.Sequenced(leaseB)
	_, producerB := connect(t, url)
	for _, body := range []string{"b1", "b2", "b3", "b4", "b5"} {
		m := &nats.Msg{Subject: subject, Data: []byte(body)}
		fencejetstream.Stamp(ctx, m, lb)
		if _, err := producerB.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}

	// A consumer applies b1 and b2, commits b3 and crashes before its ack,
	// holding b4 and b5. (A's a3 and a4 are still held by the stalled one.)
	crashingConn, crashing := connect(t, url)
	got := fetch(t, crashing, stream, durable, 5)
	for i, want := range []string{"b1", "b2", "b3", "b4", "b5"} {
		if id(got[i]) != want {
			t.Fatalf("consumer got %s, want %s (A's held messages came back before AckWait?)", id(got[i]), want)
		}
	}
	for _, m := range got[:2] {
		if o := handle(m); o != fencemsg.Applied {
			t.Fatalf("%s: %v, want applied", id(m), o)
		}
	}
	o, err := sink.Consumer.Apply(ctx, got[2].Headers(), sink.Apply("b3", got[2].Headers()))
	if o != fencemsg.Applied {
		t.Fatalf("b3: %v, %v", o, err)
	}
	sink.Record("b3", o)
	crashingConn.Close()
	stalledConn.Close()

	// A resumes and publishes a5 with its old token.
	publish(producerA, "a5", a5)

	// A successor takes whatever comes: a5 at once, then after AckWait the
	// unacked a3, a4, b3, b4, b5 again.
	_, successor := connect(t, url)
	want := map[string]fencemsg.Outcome{"a3": fencemsg.Stale, "a4": fencemsg.Stale, "a5": fencemsg.Stale,
		"b3": fencemsg.Duplicate, "b4": fencemsg.Applied, "b5": fencemsg.Applied}
	deadline := time.Now().Add(30 * time.Second)
	for done := 0; done < len(want); {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d messages settled within 30s", done, len(want))
		}
		for _, m := range fetch(t, successor, stream, durable, 1) {
			o := handle(m)
			if w, ok := want[id(m)]; !ok || (o.Done() && o != w) {
				t.Fatalf("successor: %s %v, want %v", id(m), o, w)
			}
			if o.Done() {
				done++
			}
		}
	}

	sink.Check(t, []string{"a1", "a2", "b1", "b2", "b3", "b4", "b5"}, []string{"a3", "a4", "a5"}, "A")
	c, err := admin.Consumer(ctx, stream, durable)
	if err != nil {
		t.Fatal(err)
	}
	// An ack is a publish the server takes in its own time: wait for the
	// last ones to be counted.
	for settleBy := time.Now().Add(10 * time.Second); ; {
		info, err := c.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.NumPending == 0 && info.NumAckPending == 0 {
			break
		}
		if time.Now().After(settleBy) {
			t.Fatalf("consumer has %d messages pending and %d unacked after 10s, want 0 (every message settled)", info.NumPending, info.NumAckPending)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if h, err := sink.Guard.Highest(ctx, scope); err != nil || h != leaseB.Token() {
		t.Errorf("highest = %d, %v; want B's token %d", h, err, leaseB.Token())
	}
}
