package fencesql_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencesql"
	"github.com/fencedio/fenced/internal/scopetest"
)

// Every entry point of the SQL guard applies fence.ValidateScope before any
// statement runs, and every valid scope round-trips through the scope
// column exactly, on each real database.
func TestScopeRule(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		db, _ := openDB(t, b)
		g := newGuard(t, db, b.dialect, fencesql.Config{})
		ctx := t.Context()
		for _, tc := range scopetest.Cases {
			called := 0
			err := g.Do(ctx, tc.Scope, 3, func(context.Context, *sql.Tx) error { called++; return nil })
			extErr := g.External().Do(ctx, tc.Scope, 4, func(context.Context) error { called++; return nil })
			tx, err2 := db.BeginTx(ctx, nil)
			if err2 != nil {
				t.Fatal(err2)
			}
			checkErr := g.Check(ctx, tx, tc.Scope, 5)
			if err2 := tx.Commit(); err2 != nil && checkErr == nil {
				t.Fatalf("%s: commit: %v", tc.Name, err2)
			}
			h, hErr := g.Highest(ctx, tc.Scope)
			if tc.Valid {
				if err != nil || extErr != nil || checkErr != nil || called != 2 {
					t.Errorf("%s: Do %v, External().Do %v, Check %v, applied %d; want all accepted", tc.Name, err, extErr, checkErr, called)
				}
				if hErr != nil || h != 5 {
					t.Errorf("%s: Highest = %d, %v; want 5", tc.Name, h, hErr)
				}
				continue
			}
			for i, e := range []error{err, extErr, checkErr, hErr} {
				if !errors.Is(e, fence.ErrInvalidScope) {
					t.Errorf("%s: %s = %v; want ErrInvalidScope", tc.Name, []string{"Do", "External().Do", "Check", "Highest"}[i], e)
				}
			}
			if called != 0 {
				t.Errorf("%s: applied %d times; want 0", tc.Name, called)
			}
		}
	})
}
