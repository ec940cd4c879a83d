package fencereport_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencereport"
	"github.com/fencedio/fenced/internal/fencedtest"
)

// A guard with a reporter: worker-A's lease expires while it is paused,
// worker-B takes the key and writes, and A's late write is refused. fenced
// then names both epochs.
func Example() {
	// An in-process fenced node; in production, Endpoints name yours.
	t := &fencedtest.ExampleTB{}
	defer t.Close()
	srv := fencedtest.Start(t)
	ctx := context.Background()
	fc, err := client.New(client.Config{Endpoint: srv.URL})
	if err != nil {
		log.Fatal(err)
	}

	rep, err := fencereport.New(fencereport.Config{Resource: "ledger", Sender: fc})
	if err != nil {
		log.Fatal(err)
	}
	guard := fence.NewMemory(fence.MemoryConfig{Observer: rep})
	write := func(l *client.Lease) error {
		return fence.DoLease(ctx, guard, l, func(context.Context) error { return nil })
	}

	a, err := fc.Acquire(ctx, "jobs/invoices", client.WithOwner("worker-A"), client.WithTTL(200*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	a.Orphan() // worker-A pauses; its lease expires
	b, err := fc.Acquire(ctx, "jobs/invoices", client.WithOwner("worker-B"), client.WithWait(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	if err := write(b); err != nil {
		log.Fatal(err)
	}
	for range 3 {
		if err := write(a); !errors.Is(err, fence.ErrStaleToken) {
			log.Fatal(err)
		}
	}

	if err := rep.Close(ctx); err != nil { // sends what is queued
		log.Fatal(err)
	}
	list, _, err := fc.ListRejections(ctx, "jobs/", 0)
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range list {
		fmt.Printf("%s's token refused %d× by %s after %s's (a newer token: %v)\n",
			r.PresentedOwner, r.Count, r.Resource, r.HighestOwner, r.Highest > r.Presented)
	}
	fmt.Println("dropped:", rep.Dropped())
	// Output:
	// worker-A's token refused 3× by ledger after worker-B's (a newer token: true)
	// dropped: 0
}
