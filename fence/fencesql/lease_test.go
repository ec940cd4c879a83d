package fencesql_test

import (
	"context"
	"database/sql"
	"errors"
	"math"
	"sync"
	"testing"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencesql"
)

// lease is a fence.Lease that remembers what it was told.
type lease struct {
	key   string
	token uint64
	mu    sync.Mutex
	lost  []error
}

func (l *lease) Key() string   { return l.key }
func (l *lease) Token() uint64 { return l.token }
func (l *lease) MarkLost(err error) {
	l.mu.Lock()
	l.lost = append(l.lost, err)
	l.mu.Unlock()
}

func (l *lease) losses() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]error(nil), l.lost...)
}

// TestDoLease checks the lease-taking forms on every database: accepted
// writes commit with the lease's token, a stale rejection reaches MarkLost
// exactly once and writes nothing, and other errors (out of range, fn's own)
// do not tell the lease it is lost.
func TestDoLease(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		db, _ := openDB(t, b)
		g := newGuard(t, db, b.dialect, fencesql.Config{})
		w := newWritesTable(t, db, b.dialect)
		scope := uniqueName("orders")
		old, cur := &lease{key: scope, token: 4}, &lease{key: scope, token: 5}
		write := func(l *lease) func(context.Context, *sql.Tx) error {
			return func(ctx context.Context, tx *sql.Tx) error { return w.insert(ctx, tx, l.key, l.token) }
		}

		if err := g.DoLease(ctx, old, write(old)); err != nil {
			t.Fatal(err)
		}
		if err := g.DoLease(ctx, cur, write(cur)); err != nil {
			t.Fatal(err)
		}
		err := g.DoLease(ctx, old, write(old))
		var stale *fence.StaleTokenError
		if !errors.As(err, &stale) || stale.Presented != 4 || stale.Highest != 5 {
			t.Fatalf("DoLease with the old lease: %v, want stale 4 < 5", err)
		}
		if ls := old.losses(); len(ls) != 1 || !errors.Is(ls[0], fence.ErrStaleToken) {
			t.Fatalf("old lease MarkLost calls: %v, want one stale", ls)
		}
		if n := w.count(t, db, scope, 4); n != 1 {
			t.Fatalf("%d writes with token 4, want 1 (the stale one must not commit)", n)
		}

		// CheckLease inside the caller's transaction.
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		err = g.CheckLease(ctx, tx, old)
		tx.Rollback()
		if !errors.Is(err, fence.ErrStaleToken) || len(old.losses()) != 2 {
			t.Fatalf("CheckLease with the old lease: %v, MarkLost calls %d; want stale, 2", err, len(old.losses()))
		}

		// Errors that are not stale leave the lease alone.
		boom := errors.New("boom")
		if err := g.DoLease(ctx, cur, func(context.Context, *sql.Tx) error { return boom }); !errors.Is(err, boom) {
			t.Fatalf("DoLease with failing fn: %v", err)
		}
		huge := &lease{key: scope, token: math.MaxInt64 + 1}
		if err := g.DoLease(ctx, huge, write(huge)); !errors.Is(err, fencesql.ErrTokenOutOfRange) {
			t.Fatalf("DoLease with token 2^63: %v, want ErrTokenOutOfRange", err)
		}
		if ls := append(cur.losses(), huge.losses()...); len(ls) != 0 {
			t.Fatalf("MarkLost called for errors that are not stale: %v", ls)
		}
	})
}

// TestUpdateLease checks RowFence's lease-taking form.
func TestUpdateLease(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db, _ := openDB(t, b)
			rf := newItemsTable(t, db, b.dialect)
			table := rf.Config().Table
			old, cur := &lease{key: "items", token: 6}, &lease{key: "items", token: 7}
			if err := rf.UpdateLease(ctx, db, 1, cur, fencesql.Set("name", "cur")); err != nil {
				t.Fatal(err)
			}
			if err := rf.UpdateLease(ctx, db, 1, old, fencesql.Set("name", "old")); !errors.Is(err, fence.ErrStaleToken) {
				t.Fatalf("UpdateLease with the old lease: %v, want stale", err)
			}
			if ls := old.losses(); len(ls) != 1 {
				t.Fatalf("old lease MarkLost calls: %v, want 1", ls)
			}
			if err := rf.UpdateLease(ctx, db, 99, cur, fencesql.Set("name", "x")); !errors.Is(err, fencesql.ErrRowNotFound) {
				t.Fatalf("UpdateLease of a missing row: %v", err)
			}
			if ls := cur.losses(); len(ls) != 0 {
				t.Fatalf("current lease told it is lost: %v", ls)
			}
			if it := readItem(t, db, b.dialect, table); it.name != "cur" || it.token != 7 {
				t.Fatalf("row = %+v, want cur with token 7", it)
			}
		})
	}
}
