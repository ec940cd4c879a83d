// Package quickstart is the Go snippet of the README as code that compiles:
// acquire a lease, then write to PostgreSQL through a guard that checks the
// lease's token in the write's own transaction. A test keeps the README's
// block identical to the body of PayOrder.
package quickstart

import (
	"context"
	"database/sql"
	"time"

	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/fence/fencesql"
)

// PayOrder marks order 7 paid while holding the lease orders/7, from a
// fenced node on 127.0.0.1:7420.
func PayOrder(ctx context.Context, db *sql.DB) error {
	c, err := client.New(client.Config{Endpoint: "http://127.0.0.1:7420", TTL: 10 * time.Second})
	if err != nil {
		return err
	}
	l, err := c.Acquire(ctx, "orders/7", client.WithWait(30*time.Second))
	if err != nil {
		return err // *client.HeldError when someone else still held it after 30 s
	}
	defer l.Release(context.Background())

	// Every write presents the token; the guard checks it in the write's own
	// transaction. A stale token cancels l.Context(): stop, never retry.
	guard, err := fencesql.New(db, fencesql.Config{Dialect: fencesql.Postgres})
	if err != nil {
		return err
	}
	if err := guard.Migrate(ctx); err != nil { // creates the scope table once
		return err
	}
	return guard.DoLease(l.Context(), l, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE orders SET status = 'paid' WHERE id = 7`)
		return err
	}) // errors.Is(err, fence.ErrStaleToken): someone newer holds orders/7
}
