package fencemsg_test

import (
	"context"
	"fmt"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencemsg"
)

// A queue delivers a message of B (token 42) before a late one of A (token
// 41), and redelivers B's after a consumer crash. The headers are a plain
// map here; fenceamqp and fencejetstream carry them in RabbitMQ and NATS.
func ExampleConsumer_Apply() {
	ctx := context.Background()
	balance := 0 // the consumer's state, kept in memory like the guard's
	consumer, err := fencemsg.New(fencemsg.Config{Guard: fence.NewMemory(fence.MemoryConfig{})})
	if err != nil {
		panic(err)
	}

	stamped := func(token, seq uint64) fencemsg.Map {
		h := fencemsg.Map{}
		fencemsg.Stamp{Scope: "accounts/7", Token: token, Sequence: seq}.Write(h)
		return h
	}
	queue := []fencemsg.Map{
		stamped(42, 1), // B's first message
		stamped(41, 3), // A's, delayed in the queue while A was paused
		stamped(42, 1), // B's first message again, after a consumer crash
		stamped(42, 2),
	}
	for _, h := range queue {
		o, err := consumer.Apply(ctx, h, func(ctx context.Context) error {
			balance += 10
			return nil
		})
		fmt.Printf("token %s sequence %s: %v (ack: %v) %v\n", h[fencemsg.HeaderToken], h[fencemsg.HeaderSequence], o, o.Done(), err)
	}
	fmt.Println("balance:", balance)
	// Output:
	// token 42 sequence 1: applied (ack: true) <nil>
	// token 41 sequence 3: stale (ack: true) stale fencing token for scope "accounts/7": presented 41, highest accepted 42
	// token 42 sequence 1: duplicate (ack: true) duplicate write for scope "accounts/7": token 42 sequence 1, last sequence accepted 1 (already applied)
	// token 42 sequence 2: applied (ack: true) <nil>
	// balance: 20
}
