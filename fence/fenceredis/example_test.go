package fenceredis_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fenceredis"
	"github.com/fencedio/fenced/internal/fencedtest"
	"github.com/redis/go-redis/v9"
)

func ExampleGuard_Set() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: redisAddr()}) // 127.0.0.1:6379 by default
	defer client.Close()
	guard, err := fenceredis.New(client, fenceredis.Config{})
	if err != nil {
		panic(err)
	}

	scope := "orders/7-" + rand.Text() // unique, so that reruns start afresh
	key := fenceredis.Key(scope, "status")
	defer client.Del(ctx, key, guard.TokenKey(scope))

	// B holds the lease with token 42 and writes.
	err = guard.Set(ctx, scope, 42, key, "shipped", 0)
	fmt.Println("token 42:", err)

	// A, paused while its lease (token 41) expired, resumes and writes.
	err = guard.Set(ctx, scope, 41, key, "cancelled", 0)
	var stale *fence.StaleTokenError
	if errors.As(err, &stale) {
		fmt.Printf("token 41: rejected, presented %d, highest %d\n", stale.Presented, stale.Highest)
	}

	status, _ := client.Get(ctx, key).Result()
	fmt.Println("status:", status)
	// Output:
	// token 42: <nil>
	// token 41: rejected, presented 41, highest 42
	// status: shipped
}

// The tokens come from real leases: A's lease expires on the server while A
// is paused, B acquires the key, and A's write after the pause is rejected.
func ExampleGuard_Set_lease() {
	// An in-process fenced node; in production, Endpoint names yours.
	t := &fencedtest.ExampleTB{}
	defer t.Close()
	srv := fencedtest.Start(t)

	ctx := context.Background()
	a, err := client.New(client.Config{Endpoint: srv.URL, Owner: "A", TTL: 300 * time.Millisecond})
	if err != nil {
		panic(err)
	}
	b, err := client.New(client.Config{Endpoint: srv.URL, Owner: "B"})
	if err != nil {
		panic(err)
	}

	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()}) // 127.0.0.1:6379 by default
	defer rdb.Close()
	guard, err := fenceredis.New(rdb, fenceredis.Config{})
	if err != nil {
		panic(err)
	}

	// The lease key is the scope; the data key shares its hash tag.
	scope := "orders/7-" + rand.Text() // unique, so that reruns start afresh
	key := fenceredis.Key(scope, "status")
	defer rdb.Del(ctx, key, guard.TokenKey(scope))
	setStatus := func(l *client.Lease, status string) string {
		err := guard.Set(ctx, l.Key(), l.Token(), key, status, 0)
		var stale *fence.StaleTokenError
		switch {
		case errors.As(err, &stale):
			return "rejected (stale)"
		case err != nil:
			return err.Error()
		}
		return "accepted"
	}

	leaseA, err := a.Acquire(ctx, scope)
	if err != nil {
		panic(err)
	}
	fmt.Println("A writes with its token:", setStatus(leaseA, "paid by A"))

	// A pauses (GC, VM freeze) and sends no renewals. Orphan stands in for
	// the pause: it stops the renewals without releasing, so the server
	// expires the lease after its TTL, and B, waiting, gets the key.
	leaseA.Orphan()
	leaseB, err := b.Acquire(ctx, scope, client.WithWait(5*time.Second))
	if err != nil {
		panic(err)
	}
	defer leaseB.Release(ctx)
	fmt.Println("B's token is higher:", leaseB.Token() > leaseA.Token())
	fmt.Println("B writes with its token:", setStatus(leaseB, "shipped by B"))

	// A resumes and writes with the token it acquired.
	fmt.Println("A's late write:", setStatus(leaseA, "cancelled by A"))

	status, err := rdb.Get(ctx, key).Result()
	if err != nil {
		panic(err)
	}
	highest, err := guard.Highest(ctx, scope)
	if err != nil {
		panic(err)
	}
	fmt.Println("status:", status)
	fmt.Println("highest accepted is B's token:", highest == leaseB.Token())
	// Output:
	// A writes with its token: accepted
	// B's token is higher: true
	// B writes with its token: accepted
	// A's late write: rejected (stale)
	// status: shipped by B
	// highest accepted is B's token: true
}
