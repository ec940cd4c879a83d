package fencesql_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencesql"
	"github.com/fencedio/fenced/internal/signtest"
)

// With a verifier, a token whose signature is missing or wrong never
// reaches the database: fn does not run and the highest token stays.
func TestSignedTokens(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		db, _ := openDB(t, b)
		plain := newGuard(t, db, b.dialect, fencesql.Config{})
		signtest.CheckGuard(t, "orders/7", func(v *fence.Verifier) signtest.Mutate {
			g, err := fencesql.New(db, fencesql.Config{Dialect: b.dialect, Table: plain.Table(), Verifier: v})
			if err != nil {
				t.Fatal(err)
			}
			return func(ctx context.Context, scope string, token uint64) (bool, error) {
				ran := false
				err := g.Do(ctx, scope, token, func(context.Context, *sql.Tx) error { ran = true; return nil })
				return ran, err
			}
		}, plain.Highest)
	})
}
