package fencesql_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencedio/fenced/fence/fencesql"
)

// withParam appends a query parameter to a PostgreSQL URL or a
// go-sql-driver DSN. Both drivers set unknown parameters as session
// settings (pgx as run-time parameters, go-sql-driver with SET).
func withParam(dsn, kv string) string {
	if strings.Contains(dsn, "?") {
		return dsn + "&" + kv
	}
	return dsn + "?" + kv
}

// holdScope locks scope's row in a transaction of g (token 1) and commits
// it after hold.
func holdScope(t *testing.T, db *sql.DB, g *fencesql.Guard, scope string, hold time.Duration) {
	t.Helper()
	tx, err := db.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Check(context.Background(), tx, scope, 1); err != nil {
		tx.Rollback()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	time.AfterFunc(hold, func() { done <- tx.Commit() })
	t.Cleanup(func() {
		if err := <-done; err != nil {
			t.Errorf("holder commit: %v", err)
		}
	})
}

// TestLockTimeoutRetried holds a scope's row lock for longer than the
// database's lock wait timeout (PostgreSQL lock_timeout, SQLSTATE 55P03;
// MariaDB innodb_lock_wait_timeout, error 1205; SQLite without a busy
// timeout, SQLITE_BUSY at once). Do with Retries must back off and retry
// until the holder is gone, not fail at once or spend its retries in a
// burst.
func TestLockTimeoutRetried(t *testing.T) {
	cases := []struct {
		backend
		impatient func(t testing.TB, dsn string) string // DSN that gives up waiting early
		hold      time.Duration
		retries   int
	}{
		{backends()[0], func(_ testing.TB, dsn string) string { return withParam(dsn, "lock_timeout=50ms") }, 300 * time.Millisecond, 5},
		{backends()[1], func(_ testing.TB, dsn string) string { return withParam(dsn, "innodb_lock_wait_timeout=1") }, 1500 * time.Millisecond, 3},
		{backends()[2], func(_ testing.TB, dsn string) string { return strings.SplitN(dsn, "?", 2)[0] }, 100 * time.Millisecond, 5},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			db, dsn := openDB(t, c.backend)
			g := newGuard(t, db, c.dialect, fencesql.Config{})
			idb, err := sql.Open(c.driver, c.impatient(t, dsn))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { idb.Close() })
			ig, err := fencesql.New(idb, fencesql.Config{Dialect: c.dialect, Table: g.Table(), Retries: c.retries})
			if err != nil {
				t.Fatal(err)
			}
			const scope = "lock/held"
			holdScope(t, db, g, scope, c.hold)
			start := time.Now()
			err = ig.Do(t.Context(), scope, 2, func(context.Context, *sql.Tx) error { return nil })
			if err != nil {
				t.Fatalf("Do after %v: %v (Retryable %v)", time.Since(start), err, fencesql.Retryable(err))
			}
			if h := mustHighest(t, g, scope); h != 2 {
				t.Fatalf("highest %d, want 2", h)
			}
		})
	}
}

// TestRetryBackoffStopsAtContext keeps a SQLite database locked for good:
// Do's retries must wait between attempts and stop when the context ends,
// reporting the context's error along with the last busy error.
func TestRetryBackoffStopsAtContext(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locked.db")
	db, err := sql.Open("sqlite", sqliteDSN(path))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	g := newGuard(t, db, fencesql.SQLite, fencesql.Config{})
	tx, err := db.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if err := g.Check(context.Background(), tx, "locked", 1); err != nil {
		t.Fatal(err)
	}

	idb, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { idb.Close() })
	ig, err := fencesql.New(idb, fencesql.Config{Dialect: fencesql.SQLite, Table: g.Table(), Retries: 1000})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = ig.Do(ctx, "locked", 2, func(context.Context, *sql.Tx) error { return nil })
	elapsed := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) || !fencesql.Retryable(err) {
		t.Fatalf("Do = %v after %v; want the deadline and the busy error", err, elapsed)
	}
	if elapsed > 2*time.Second {
		t.Fatalf("Do returned %v after the context ended", elapsed-300*time.Millisecond)
	}
}

// TestSerializationFailureRetried makes a PostgreSQL REPEATABLE READ
// transaction of Do fail with a serialization failure (40001) for certain:
// another transaction holds the scope's row, raised, until Do's first
// attempt waits for it, then commits. Without retries Do returns that
// failure, Retryable; with one retry, which waits the backoff and finds the
// row free, the write goes through. (Writers raising one scope without
// pause, as this test did before, show the same only by chance: on a
// loaded machine a write could keep colliding for all its retries.)
func TestSerializationFailureRetried(t *testing.T) {
	b := backends()[0]
	db, _ := openDB(t, b)
	ctx := t.Context()
	rr := &sql.TxOptions{Isolation: sql.LevelRepeatableRead}
	noop := func(context.Context, *sql.Tx) error { return nil }
	for _, retries := range []int{0, 1} {
		g := newGuard(t, db, b.dialect, fencesql.Config{Retries: retries, TxOptions: rr})
		if err := g.Do(ctx, "rr/hot", 1, noop); err != nil {
			t.Fatal(err)
		}
		holder, err := db.BeginTx(ctx, rr)
		if err != nil {
			t.Fatal(err)
		}
		if err := g.Check(ctx, holder, "rr/hot", 2); err != nil {
			t.Fatal(err)
		}
		var pid int
		if err := holder.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- g.Do(ctx, "rr/hot", 3, noop) }()
		// PostgreSQL says when Do's transaction waits for the holder's row.
		for blocked := 0; blocked == 0; {
			if err := db.QueryRowContext(ctx, "SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))", pid).Scan(&blocked); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				t.Fatalf("Do returned %v while the holder held the row", err)
			case <-time.After(5 * time.Millisecond):
			}
		}
		if err := holder.Commit(); err != nil {
			t.Fatal(err)
		}
		err = <-done
		switch {
		case retries == 0 && (err == nil || !fencesql.Retryable(err)):
			t.Errorf("Do without retries after a concurrent raise: %v, want a retryable serialization failure", err)
		case retries == 1 && err != nil:
			t.Errorf("Do with a retry after a concurrent raise: %v", err)
		}
	}
}

// TestContextEndsInCallback lets the context expire while the callback
// runs. The database rolls the transaction back; Do must say so and match
// the context's error, and nothing may be written.
func TestContextEndsInCallback(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		db, _ := openDB(t, b)
		g := newGuard(t, db, b.dialect, fencesql.Config{})
		w := newWritesTable(t, db, b.dialect)
		for _, returnCtxErr := range []bool{false, true} {
			ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
			err := g.Do(ctx, "ctx/ends", 5, func(ctx context.Context, tx *sql.Tx) error {
				if err := w.insert(ctx, tx, "ctx/ends", 5); err != nil {
					return err
				}
				<-ctx.Done()
				if returnCtxErr {
					return ctx.Err()
				}
				return nil
			})
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Do = %v; want it to match context.DeadlineExceeded", err)
			}
			if err == nil || !strings.Contains(err.Error(), "rolled back") || strings.Contains(err.Error(), "already been committed") {
				t.Errorf("Do = %v; want it to say the transaction was rolled back", err)
			}
		}
		if n := len(w.all(t, db)); n != 0 {
			t.Fatalf("%d writes committed", n)
		}
		if h := mustHighest(t, g, "ctx/ends"); h != 0 {
			t.Fatalf("highest %d, want 0", h)
		}
	})
}

// TestNegativeStoredToken corrupts stored tokens to a negative number, which
// no guard writes: the guards must refuse to write over it.
func TestNegativeStoredToken(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		db, _ := openDB(t, b)

		t.Run("RowFence", func(t *testing.T) {
			rf := newItemsTable(t, db, b.dialect)
			table := rf.Config().Table
			if _, err := db.ExecContext(ctx, "UPDATE "+quoteName(b.dialect, table)+" SET fence_token = -5, name = 'old' WHERE id = 1"); err != nil {
				t.Fatal(err)
			}
			err := rf.Update(ctx, db, 1, 3, fencesql.Set("name", "new"))
			if !errors.Is(err, fencesql.ErrCorruptToken) {
				t.Errorf("Update over token -5 = %v, want ErrCorruptToken", err)
			}
			var name string
			var tok int64
			if err := db.QueryRowContext(ctx, "SELECT name, fence_token FROM "+quoteName(b.dialect, table)+" WHERE id = 1").Scan(&name, &tok); err != nil {
				t.Fatal(err)
			}
			if name != "old" || tok != -5 {
				t.Fatalf("row is now %q with token %d; want it untouched", name, tok)
			}
		})

		t.Run("ScopeTable", func(t *testing.T) {
			if b.dialect == fencesql.Postgres {
				t.Skip("the PostgreSQL scope table has CHECK (highest_token >= 0)")
			}
			g := newGuard(t, db, b.dialect, fencesql.Config{})
			if err := g.Do(ctx, "neg", 1, func(context.Context, *sql.Tx) error { return nil }); err != nil {
				t.Fatal(err)
			}
			if _, err := db.ExecContext(ctx, "UPDATE "+quoteName(b.dialect, g.Table())+" SET highest_token = -1"); err != nil {
				t.Fatal(err)
			}
			called := false
			err := g.Do(ctx, "neg", 2, func(context.Context, *sql.Tx) error { called = true; return nil })
			if !errors.Is(err, fencesql.ErrCorruptToken) || called {
				t.Fatalf("Do over highest -1 = %v (callback ran: %v), want ErrCorruptToken without running it", err, called)
			}
			if _, err := g.Highest(ctx, "neg"); !errors.Is(err, fencesql.ErrCorruptToken) {
				t.Fatalf("Highest = %v, want ErrCorruptToken", err)
			}
		})
	})
}
