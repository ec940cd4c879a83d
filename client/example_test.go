package client_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/internal/fencedtest"
)

func ExampleClient_Acquire() {
	// An in-process fenced node; in production, Endpoint names yours.
	t := &fencedtest.ExampleTB{}
	defer t.Close()
	srv := fencedtest.Start(t)

	ctx := context.Background()
	a, _ := client.New(client.Config{Endpoint: srv.URL, Owner: "worker-a"})
	b, _ := client.New(client.Config{Endpoint: srv.URL, Owner: "worker-b"})

	lease, err := a.Acquire(ctx, "orders/7")
	if err != nil {
		fmt.Println("acquire:", err)
		return
	}
	fmt.Println("worker-a holds", lease.Key(), "with a token:", lease.Token() > 0)

	// While worker-a renews, nobody else gets the key.
	_, err = b.Acquire(ctx, "orders/7")
	var held *client.HeldError
	if errors.As(err, &held) {
		fmt.Println("worker-b refused; held by", held.Owner, "with the same token:", held.Token == lease.Token())
	}

	// Present lease.Token() with every write, and stop when the lease ends.
	if err := lease.Release(ctx); err != nil {
		fmt.Println("release:", err)
	}
	<-lease.Done()
	fmt.Println("worker-a's context ended:", context.Cause(lease.Context()))

	next, err := b.Acquire(ctx, "orders/7")
	if err != nil {
		fmt.Println("acquire:", err)
		return
	}
	fmt.Println("worker-b's token is higher:", next.Token() > lease.Token())
	next.Release(ctx)
	// Output:
	// worker-a holds orders/7 with a token: true
	// worker-b refused; held by worker-a with the same token: true
	// worker-a's context ended: lease released
	// worker-b's token is higher: true
}
