package fencejetstream_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencemsg"
	"github.com/fencedio/fenced/fence/fencemsg/fencejetstream"
	"github.com/fencedio/fenced/fence/fencenats"
)

func natsURL() string {
	if u := os.Getenv("FENCED_TEST_NATS"); u != "" {
		return u
	}
	return "nats://127.0.0.1:4222"
}

// lease stands in for a *client.Lease (see the fenceamqp example for real
// leases).
type lease struct {
	key   string
	token uint64
}

func (l lease) Key() string    { return l.key }
func (l lease) Token() uint64  { return l.token }
func (l lease) MarkLost(error) {}

// The consumer's effect is a JetStream KV entry, and the fencenats KV guard
// keeps the scope's highest token in that same entry: each message's
// effect and its token are stored by one compare-and-set.
func ExampleHandle() {
	ctx := context.Background()
	nc, err := nats.Connect(natsURL()) // nats://127.0.0.1:4222 by default
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	name := "ORDERS_" + rand.Text()
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{name}})
	if err != nil {
		panic(err)
	}
	defer js.DeleteStream(ctx, name)
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: strings.ToLower(name)})
	if err != nil {
		panic(err)
	}
	defer js.DeleteKeyValue(ctx, strings.ToLower(name))

	// B (token 42) publishes; then A's message (token 41), delayed, arrives.
	b, a := fence.Sequenced(lease{"orders/7", 42}), fence.Sequenced(lease{"orders/7", 41})
	for _, m := range []struct {
		l    fence.Lease
		body string
	}{{b, "shipped"}, {a, "cancelled"}} {
		msg := &nats.Msg{Subject: name, Data: []byte(m.body)}
		fencejetstream.Stamp(ctx, msg, m.l)
		if _, err := js.PublishMsg(ctx, msg); err != nil {
			panic(err)
		}
	}

	guard, _ := fencenats.NewKV(kv, fencenats.Config{})
	consumer, _ := fencemsg.New(fencemsg.Config{Guard: guard})
	c, _ := s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{AckPolicy: jetstream.AckExplicitPolicy})
	batch, _ := c.Fetch(2, jetstream.FetchMaxWait(5*time.Second))
	for m := range batch.Messages() {
		o, _ := fencejetstream.Handle(ctx, consumer, m, func(ctx context.Context) error {
			fencenats.SetValue(ctx, m.Data())
			return nil
		}, fencejetstream.Options{})
		fmt.Printf("%s: %v\n", m.Data(), o)
	}
	e, _ := guard.Get(ctx, "orders/7")
	fmt.Printf("orders/7: %s, token %d\n", e.Value, e.Token)
	// Output:
	// shipped: applied
	// cancelled: stale
	// orders/7: shipped, token 42
}
