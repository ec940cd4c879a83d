package fenceamqp_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencemsg"
	"github.com/fencedio/fenced/fence/fencemsg/fenceamqp"
	"github.com/fencedio/fenced/internal/fencedtest"
)

func amqpURL() string {
	if u := os.Getenv("FENCED_TEST_AMQP"); u != "" {
		return u
	}
	return "amqp://guest:guest@127.0.0.1:5672/"
}

// A stamps a message with its lease, pauses past its TTL and publishes it
// late, after B, who acquired the key meanwhile. The consumer applies B's
// message and acks A's as stale without applying it.
func ExampleHandle() {
	t := &fencedtest.ExampleTB{}
	defer t.Close()
	srv := fencedtest.Start(t) // an in-process fenced node
	ctx := context.Background()
	a, _ := client.New(client.Config{Endpoint: srv.URL, Owner: "A", TTL: 300 * time.Millisecond})
	b, _ := client.New(client.Config{Endpoint: srv.URL, Owner: "B"})

	conn, err := amqp.Dial(amqpURL()) // RabbitMQ on 127.0.0.1:5672 by default
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	ch, _ := conn.Channel()
	q, err := ch.QueueDeclare("orders-"+rand.Text(), false, true, false, false, nil)
	if err != nil {
		panic(err)
	}

	leaseA, _ := a.Acquire(ctx, "orders/7")
	late := amqp.Publishing{Body: []byte("cancel order 7")}
	fenceamqp.Stamp(ctx, &late, fence.Sequenced(leaseA)) // stamped, then A pauses
	leaseA.Orphan()

	leaseB, err := b.Acquire(ctx, "orders/7", client.WithWait(5*time.Second))
	if err != nil {
		panic(err)
	}
	defer leaseB.Release(ctx)
	ship := amqp.Publishing{Body: []byte("ship order 7")}
	fenceamqp.Stamp(ctx, &ship, fence.Sequenced(leaseB))
	ch.PublishWithContext(ctx, "", q.Name, false, false, ship)
	ch.PublishWithContext(ctx, "", q.Name, false, false, late) // A resumes

	// The consumer's state and the guard's tokens live in this process's
	// memory here; fencesql's TxGuard keeps both in one database.
	status := "new"
	consumer, _ := fencemsg.New(fencemsg.Config{Guard: fence.NewMemory(fence.MemoryConfig{})})
	deliveries, _ := ch.Consume(q.Name, "", false, false, false, false, nil)
	for range 2 {
		d := <-deliveries
		o, _ := fenceamqp.Handle(ctx, consumer, d, func(ctx context.Context) error {
			status = string(d.Body)
			return nil
		})
		fmt.Printf("%q: %v\n", d.Body, o)
	}
	fmt.Println("status:", status)
	// Output:
	// "ship order 7": applied
	// "cancel order 7": stale
	// status: ship order 7
}
