package fencesql_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencesql"
	"github.com/fencedio/fenced/internal/fencedtest"
)

// openExampleDB opens a fresh SQLite database in a temporary directory.
func openExampleDB() (db *sql.DB, cleanup func()) {
	dir, err := os.MkdirTemp("", "fencesql-example")
	if err != nil {
		log.Fatal(err)
	}
	db, err = sql.Open("sqlite", "file:"+filepath.Join(dir, "app.db")+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	if err != nil {
		log.Fatal(err)
	}
	return db, func() { db.Close(); os.RemoveAll(dir) }
}

// The scope table: the order row and the highest token of "orders/7" commit
// in one transaction.
func ExampleGuard_Do() {
	ctx := context.Background()
	db, cleanup := openExampleDB()
	defer cleanup()

	guard, err := fencesql.New(db, fencesql.Config{Dialect: fencesql.SQLite})
	if err != nil {
		log.Fatal(err)
	}
	if err := guard.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (id INTEGER PRIMARY KEY, status TEXT NOT NULL)`); err != nil {
		log.Fatal(err)
	}

	setStatus := func(token uint64, status string) error {
		return guard.Do(ctx, "orders/7", token, func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx,
				`INSERT INTO orders (id, status) VALUES (7, ?) ON CONFLICT (id) DO UPDATE SET status = excluded.status`, status)
			return err
		})
	}

	// In a real program each token comes from a lease on "orders/7"
	// (lease.Token() of the fenced client, as in ExampleGuard_Do_lease);
	// literal tokens keep this example short. Token 42 is the current
	// holder's, 41 a previous holder's that woke up late.
	fmt.Println("token 42:", setStatus(42, "paid"))

	err = setStatus(41, "cancelled")
	var stale *fence.StaleTokenError
	if errors.As(err, &stale) {
		fmt.Printf("token 41: rejected, highest accepted is %d\n", stale.Highest)
	}

	var status string
	if err := db.QueryRowContext(ctx, `SELECT status FROM orders WHERE id = 7`).Scan(&status); err != nil {
		log.Fatal(err)
	}
	highest, err := guard.Highest(ctx, "orders/7")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("order 7 is %s, highest token %d\n", status, highest)
	// Output:
	// token 42: <nil>
	// token 41: rejected, highest accepted is 42
	// order 7 is paid, highest token 42
}

// The tokens come from real leases: A's lease expires on the server while A
// is paused, B acquires the key, and A's write after the pause is rejected.
func ExampleGuard_Do_lease() {
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

	db, cleanup := openExampleDB()
	defer cleanup()
	guard, err := fencesql.New(db, fencesql.Config{Dialect: fencesql.SQLite})
	if err != nil {
		log.Fatal(err)
	}
	if err := guard.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (id INTEGER PRIMARY KEY, status TEXT NOT NULL)`); err != nil {
		log.Fatal(err)
	}

	// The lease key is the scope: the order row and the highest token of
	// "orders/7" commit in one transaction.
	setStatus := func(l *client.Lease, status string) string {
		err := guard.Do(ctx, l.Key(), l.Token(), func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx,
				`INSERT INTO orders (id, status) VALUES (7, ?) ON CONFLICT (id) DO UPDATE SET status = excluded.status`, status)
			return err
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

	leaseA, err := a.Acquire(ctx, "orders/7")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("A writes with its token:", setStatus(leaseA, "paid by A"))

	// A pauses (GC, VM freeze) and sends no renewals. Orphan stands in for
	// the pause: it stops the renewals without releasing, so the server
	// expires the lease after its TTL, and B, waiting, gets the key.
	leaseA.Orphan()
	leaseB, err := b.Acquire(ctx, "orders/7", client.WithWait(5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer leaseB.Release(ctx)
	fmt.Println("B's token is higher:", leaseB.Token() > leaseA.Token())
	fmt.Println("B writes with its token:", setStatus(leaseB, "shipped by B"))

	// A resumes and writes with the token it acquired.
	fmt.Println("A's late write:", setStatus(leaseA, "cancelled by A"))

	var status string
	if err := db.QueryRowContext(ctx, `SELECT status FROM orders WHERE id = 7`).Scan(&status); err != nil {
		log.Fatal(err)
	}
	highest, err := guard.Highest(ctx, "orders/7")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("order 7:", status)
	fmt.Println("highest accepted is B's token:", highest == leaseB.Token())
	// Output:
	// A writes with its token: accepted
	// B's token is higher: true
	// B writes with its token: accepted
	// A's late write: rejected (stale)
	// order 7: shipped by B
	// highest accepted is B's token: true
}

// Row-level tokens: each row remembers the token that last wrote it.
func ExampleRowFence_Update() {
	ctx := context.Background()
	db, cleanup := openExampleDB()
	defer cleanup()

	if _, err := db.ExecContext(ctx, `CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance INTEGER NOT NULL)`); err != nil {
		log.Fatal(err)
	}
	accounts, err := fencesql.NewRowFence(fencesql.RowConfig{Dialect: fencesql.SQLite, Table: "accounts"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(accounts.AddColumnSQL())
	if _, err := db.ExecContext(ctx, accounts.AddColumnSQL()); err != nil {
		log.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO accounts (id, balance) VALUES (1, 100)`); err != nil {
		log.Fatal(err)
	}

	// Literal tokens stand in for lease tokens, as in the Guard example.
	fmt.Println("token 42:", accounts.Update(ctx, db, 1, 42, fencesql.Set("balance", 150)))
	fmt.Println("token 41:", accounts.Update(ctx, db, 1, 41, fencesql.Set("balance", 0)))
	fmt.Println("stale:", errors.Is(accounts.Update(ctx, db, 1, 41, fencesql.Set("balance", 0)), fence.ErrStaleToken))
	fmt.Println("missing row:", errors.Is(accounts.Update(ctx, db, 2, 42, fencesql.Set("balance", 1)), fencesql.ErrRowNotFound))

	var balance int
	if err := db.QueryRowContext(ctx, `SELECT balance FROM accounts WHERE id = 1`).Scan(&balance); err != nil {
		log.Fatal(err)
	}
	fmt.Println("balance:", balance)
	// Output:
	// ALTER TABLE "accounts" ADD COLUMN "fence_token" BIGINT NOT NULL DEFAULT 0
	// token 42: <nil>
	// token 41: stale fencing token for scope "accounts/1": presented 41, highest accepted 42
	// stale: true
	// missing row: true
	// balance: 150
}

// The SQL to put in a migration tool instead of calling Guard.Migrate.
func ExampleCreateTableSQL() {
	stmt, err := fencesql.CreateTableSQL(fencesql.Postgres, "")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(stmt)
	// Output:
	// CREATE TABLE IF NOT EXISTS "fence_scopes" (
	//     scope          varchar(512) PRIMARY KEY,
	//     highest_token  bigint NOT NULL CHECK (highest_token >= 0),
	//     sequence_token bigint NOT NULL DEFAULT 0,
	//     last_sequence  bigint NOT NULL DEFAULT 0
	// )
}
