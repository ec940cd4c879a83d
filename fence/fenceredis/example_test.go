package fenceredis_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fenceredis"
	"github.com/redis/go-redis/v9"
)

func ExampleGuard_Set() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: redisAddr()}) // 127.0.0.1:6379 by default
	defer client.Close()
	guard, err := fenceredis.New(client)
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
