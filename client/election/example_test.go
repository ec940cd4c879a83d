package election_test

import (
	"context"
	"fmt"

	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/client/election"
	"github.com/fencedio/fenced/internal/fencedtest"
)

func ExampleElections_Campaign() {
	// An in-process fenced node; in production, Endpoint names yours.
	t := &fencedtest.ExampleTB{}
	defer t.Close()
	srv := fencedtest.Start(t)
	c, _ := client.New(client.Config{Endpoint: srv.URL})
	e := election.New(c)
	ctx := context.Background()

	l, err := e.Campaign(ctx, "controllers/orders", "10.0.0.7:8080")
	if err != nil {
		fmt.Println("campaign:", err)
		return
	}
	// Everyone can read who leads, and with which token.
	leader, _ := e.Leader(ctx, "controllers/orders")
	fmt.Println("leader:", leader.Value, "with the leadership's token:", leader.Token == l.Token())

	// Work under l.Context() and present l.Token() with every write.
	if err := l.Resign(ctx); err != nil {
		fmt.Println("resign:", err)
	}
	_, err = e.Leader(ctx, "controllers/orders")
	fmt.Println(err)
	// Output:
	// leader: 10.0.0.7:8080 with the leadership's token: true
	// leader of "controllers/orders": election has no leader
}
