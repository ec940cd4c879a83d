package fencesql_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/fencedio/fenced/fence/fencesql"
)

// benchWrite compares one UPDATE of a user row in a transaction with the
// same transaction behind the guard: "fenced" presents the holder's token
// again (the common case), "fenced_rising" a new higher token each time,
// which also raises the stored token.
func benchWrite(b *testing.B, be backend) {
	db, _ := openDB(b, be)
	ctx := context.Background()
	g := newGuard(b, db, be.dialect, fencesql.Config{})
	table := uniqueName("fence_bench")
	if _, err := db.ExecContext(ctx, "CREATE TABLE "+quoteName(be.dialect, table)+" (id BIGINT PRIMARY KEY, n BIGINT NOT NULL)"); err != nil {
		b.Fatal(err)
	}
	dropLater(b, db, be.dialect, table)
	if _, err := db.ExecContext(ctx, "INSERT INTO "+quoteName(be.dialect, table)+" (id, n) VALUES (1, 0)"); err != nil {
		b.Fatal(err)
	}
	update := "UPDATE " + quoteName(be.dialect, table) + " SET n = n + 1 WHERE id = " + ph(be.dialect, 1)
	write := func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, update, 1)
		return err
	}

	b.Run("plain", func(b *testing.B) {
		for b.Loop() {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				b.Fatal(err)
			}
			if err := write(ctx, tx); err != nil {
				b.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("fenced", func(b *testing.B) {
		for b.Loop() {
			if err := g.Do(ctx, "bench", 1, write); err != nil {
				b.Fatal(err)
			}
		}
	})
	token := uint64(1) // outside: -count runs the sub-benchmark again on the same table
	b.Run("fenced_rising", func(b *testing.B) {
		for b.Loop() {
			token++
			if err := g.Do(ctx, "bench-rising", token, write); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkPostgresWrite(b *testing.B) { benchWrite(b, backendNamed(b, "postgres")) }
func BenchmarkMySQLWrite(b *testing.B)    { benchWrite(b, backendNamed(b, "mysql")) }
func BenchmarkSQLiteWrite(b *testing.B)   { benchWrite(b, backendNamed(b, "sqlite")) }

func backendNamed(b *testing.B, name string) backend {
	for _, be := range backends() {
		if be.name == name {
			return be
		}
	}
	b.Fatalf("no backend %q", name)
	return backend{}
}
