package fencenats_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencenats"
	"github.com/fencedio/fenced/internal/fencedtest"
)

func ExampleKV_Put() {
	ctx := context.Background()
	nc, err := nats.Connect(natsURL()) // nats://127.0.0.1:4222 by default
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	name := "orders_" + strings.ToLower(rand.Text()) // unique, so that reruns start afresh
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: name})
	if err != nil {
		panic(err)
	}
	defer js.DeleteKeyValue(ctx, name)

	guard, err := fencenats.NewKV(kv, fencenats.Config{})
	if err != nil {
		panic(err)
	}
	// B holds the lease with token 42 and writes.
	fmt.Println("token 42:", guard.Put(ctx, "orders/7", 42, []byte("shipped")))
	// A, paused while its lease (token 41) expired, resumes and writes.
	err = guard.Put(ctx, "orders/7", 41, []byte("cancelled"))
	var stale *fence.StaleTokenError
	if errors.As(err, &stale) {
		fmt.Printf("token 41: rejected, presented %d, highest %d\n", stale.Presented, stale.Highest)
	}
	e, _ := guard.Get(ctx, "orders/7")
	fmt.Printf("entry %q: %s, token %d\n", guard.Key("orders/7"), e.Value, e.Token)
	// Output:
	// token 42: <nil>
	// token 41: rejected, presented 41, highest 42
	// entry "orders/7": shipped, token 42
}

// The tokens come from real leases: A's lease expires on the server while A
// is paused, B acquires the key and publishes, and A's publish after the
// pause is refused by the stream.
func ExampleStream_PublishLease() {
	t := &fencedtest.ExampleTB{}
	defer t.Close()
	srv := fencedtest.Start(t) // an in-process fenced node

	ctx := context.Background()
	a, _ := client.New(client.Config{Endpoint: srv.URL, Owner: "A", TTL: 300 * time.Millisecond})
	b, _ := client.New(client.Config{Endpoint: srv.URL, Owner: "B"})

	nc, err := nats.Connect(natsURL())
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	name := "ORDERS_" + rand.Text()
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"}})
	if err != nil {
		panic(err)
	}
	defer js.DeleteStream(ctx, name)
	guard, err := fencenats.NewStream(js, s, fencenats.Config{})
	if err != nil {
		panic(err)
	}
	subject := name + ".orders.7" // the log of scope orders/7

	leaseA, err := a.Acquire(ctx, "orders/7")
	if err != nil {
		panic(err)
	}
	_, err = guard.PublishLease(ctx, leaseA, &nats.Msg{Subject: subject, Data: []byte("paid")})
	fmt.Println("A publishes:", err)

	leaseA.Orphan() // A pauses: no renewals; the lease expires after its TTL
	leaseB, err := b.Acquire(ctx, "orders/7", client.WithWait(5*time.Second))
	if err != nil {
		panic(err)
	}
	defer leaseB.Release(ctx)
	_, err = guard.PublishLease(ctx, leaseB, &nats.Msg{Subject: subject, Data: []byte("shipped")})
	fmt.Println("B publishes:", err)

	_, err = guard.PublishLease(ctx, leaseA, &nats.Msg{Subject: subject, Data: []byte("cancelled")})
	fmt.Println("A's late publish is stale:", errors.Is(err, fence.ErrStaleToken))
	last, _ := s.GetLastMsgForSubject(ctx, subject)
	fmt.Printf("last on the subject: %s\n", last.Data)
	// Output:
	// A publishes: <nil>
	// B publishes: <nil>
	// A's late publish is stale: true
	// last on the subject: shipped
}
