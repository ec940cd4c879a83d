package fencesql_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencesql"
	"github.com/fencedio/fenced/internal/fencedtest"
)

// errDone says a job's claim found it done already.
var errDone = errors.New("job done already")

// claimJob is step 1 of docs/job-queue.md: a fenced write before any work,
// so that the resource refuses every older token from now on. errDone: the
// job is done, skip it.
func claimJob(ctx context.Context, guard *fencesql.Guard, l *client.Lease, id int) error {
	return guard.DoLease(ctx, l, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE jobs SET status = 'running' WHERE id = ? AND status <> 'done'`, id)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return errors.Join(errDone, err)
		}
		return nil
	})
}

// finishJob is step 3: the result, fenced with the same token. It is
// refused (fence.ErrStaleToken, and the lease is marked lost) if a newer
// holder has claimed the job since.
func finishJob(ctx context.Context, guard *fencesql.Guard, l *client.Lease, id int, result string) error {
	return guard.DoLease(ctx, l, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE jobs SET status = 'done', result = ? WHERE id = ?`, result, id)
		return err
	})
}

// The claim-write pattern of docs/job-queue.md: A claims job 42 and pauses
// in the middle of its work; its lease expires and B takes the job over. B
// claims it before working, so A's result, written after its pause but
// before B's, is refused: with fencing alone (no claim) it would have been
// accepted, since B had presented no token yet.
func ExampleGuard_DoLease_jobQueue() {
	t := &fencedtest.ExampleTB{}
	defer t.Close()
	srv := fencedtest.Start(t) // in production, Endpoint names your fenced
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
	if _, err := db.ExecContext(ctx, `CREATE TABLE jobs (id INTEGER PRIMARY KEY, status TEXT NOT NULL DEFAULT 'queued', result TEXT);
		INSERT INTO jobs (id) VALUES (42)`); err != nil {
		log.Fatal(err)
	}

	leaseA, err := a.Acquire(ctx, "jobs/42")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("A claims:", claimJob(ctx, guard, leaseA, 42))
	// A pauses in the middle of its work. Orphan stands in for the pause:
	// no more renewals, so the server expires the lease and B gets it.
	leaseA.Orphan()
	leaseB, err := b.Acquire(ctx, "jobs/42", client.WithWait(5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer leaseB.Release(ctx)
	fmt.Println("B claims:", claimJob(ctx, guard, leaseB, 42))

	// A resumes and writes its result before B is done.
	err = finishJob(ctx, guard, leaseA, 42, "A's result")
	fmt.Println("A's result refused as stale:", errors.Is(err, fence.ErrStaleToken))
	fmt.Println("B's result:", finishJob(ctx, guard, leaseB, 42, "B's result"))

	var status, result string
	if err := db.QueryRowContext(ctx, `SELECT status, result FROM jobs WHERE id = 42`).Scan(&status, &result); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("job 42: %s, %s\n", status, result)
	// A later holder's claim finds the job done and skips it.
	leaseB.Release(ctx)
	leaseA2, err := a.Acquire(ctx, "jobs/42")
	if err != nil {
		log.Fatal(err)
	}
	defer leaseA2.Release(ctx)
	fmt.Println("A claims again:", claimJob(ctx, guard, leaseA2, 42))
	// Output:
	// A claims: <nil>
	// B claims: <nil>
	// A's result refused as stale: true
	// B's result: <nil>
	// job 42: done, B's result
	// A claims again: job done already
}
