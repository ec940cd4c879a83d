package fence_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"time"

	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/internal/fencedtest"
)

func ExampleNewMemory() {
	ctx := context.Background()
	g := fence.NewMemory(fence.MemoryConfig{})
	balance := 0

	// B holds the lease on "accounts/7" with token 42 and writes.
	err := g.Do(ctx, "accounts/7", 42, func(context.Context) error {
		balance = 100
		return nil
	})
	fmt.Println("write with 42:", err)

	// A, whose lease (token 41) expired while it was paused, writes late.
	err = g.Do(ctx, "accounts/7", 41, func(context.Context) error {
		balance = 0
		return nil
	})
	var stale *fence.StaleTokenError
	if errors.As(err, &stale) {
		fmt.Printf("write with 41: rejected, highest is %d\n", stale.Highest)
	}
	fmt.Println("balance:", balance)
	// Output:
	// write with 42: <nil>
	// write with 41: rejected, highest is 42
	// balance: 100
}

func ExampleNewSlogObserver() {
	// Drop the time so that the output is stable.
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey && len(groups) == 0 {
				return slog.Attr{}
			}
			return a
		},
	}))
	g := fence.NewMemory(fence.MemoryConfig{Observer: fence.NewSlogObserver(logger)})
	ctx := context.Background()
	nop := func(context.Context) error { return nil }

	_ = g.Do(ctx, "orders/7", 42, nop) // accepted: logged at Debug, below the handler's level
	_ = g.Do(ctx, "orders/7", 41, nop)
	_ = g.Do(ctx, "orders/7", 40, nop)
	// Output:
	// level=WARN msg="stale fencing token rejected" scope=orders/7 presented_token=41 highest_token=42 rejections=1
	// level=WARN msg="stale fencing token rejected" scope=orders/7 presented_token=40 highest_token=42 rejections=2
}

// The tokens come from real leases: A's lease expires on the server while A
// is paused, B acquires the key, and A's write after the pause is rejected.
func ExampleMemory_Do_lease() {
	// An in-process fenced node; in production, Endpoint names yours.
	t := &fencedtest.ExampleTB{}
	defer t.Close()
	srv := fencedtest.Start(t)

	ctx := context.Background()
	a, err := client.New(client.Config{Endpoint: srv.URL, Owner: "A", TTL: 300 * time.Millisecond})
	if err != nil {
		log.Fatal(err)
	}
	b, err := client.New(client.Config{Endpoint: srv.URL, Owner: "B"})
	if err != nil {
		log.Fatal(err)
	}

	g := fence.NewMemory(fence.MemoryConfig{})
	balance := ""
	deposit := func(l *client.Lease, by string) string {
		err := g.Do(ctx, l.Key(), l.Token(), func(context.Context) error {
			balance = "written by " + by
			return nil
		})
		var stale *fence.StaleTokenError
		switch {
		case errors.As(err, &stale):
			return "rejected (stale)"
		case err != nil:
			return err.Error()
		}
		return "accepted"
	}

	leaseA, err := a.Acquire(ctx, "accounts/7")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("A writes with its token:", deposit(leaseA, "A"))

	// A pauses (GC, VM freeze) and sends no renewals. Orphan stands in for
	// the pause: it stops the renewals without releasing, so the server
	// expires the lease after its TTL, and B, waiting, gets the key.
	leaseA.Orphan()
	leaseB, err := b.Acquire(ctx, "accounts/7", client.WithWait(5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer leaseB.Release(ctx)
	fmt.Println("B's token is higher:", leaseB.Token() > leaseA.Token())
	fmt.Println("B writes with its token:", deposit(leaseB, "B"))

	// A resumes and writes with the token it acquired.
	fmt.Println("A's late write:", deposit(leaseA, "A"))
	highest, err := g.Highest(ctx, "accounts/7")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("highest accepted is B's token:", highest == leaseB.Token())
	fmt.Println("balance:", balance)
	// Output:
	// A writes with its token: accepted
	// B's token is higher: true
	// B writes with its token: accepted
	// A's late write: rejected (stale)
	// highest accepted is B's token: true
	// balance: written by B
}
