package fencebolt_test

import (
	"context"
	"path/filepath"
	"testing"

	"go.etcd.io/bbolt"

	"github.com/fencedio/fenced/fence/fencebolt"
)

func BenchmarkDo(b *testing.B) {
	ctx := context.Background()
	open := func(b *testing.B) *fencebolt.Guard {
		g, err := fencebolt.Open(filepath.Join(b.TempDir(), "bench.db"), fencebolt.Config{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { g.Close() })
		return g
	}
	// Every call raises the token: one commit and fsync each.
	b.Run("raise", func(b *testing.B) {
		g := open(b)
		token := uint64(0)
		for b.Loop() {
			token++
			if err := g.Do(ctx, "bench", token, nop); err != nil {
				b.Fatal(err)
			}
		}
	})
	// The holder writes again with its token: a read, no commit.
	b.Run("same", func(b *testing.B) {
		g := open(b)
		for b.Loop() {
			if err := g.Do(ctx, "bench", 7, nop); err != nil {
				b.Fatal(err)
			}
		}
	})
	// DoTx commits every time, since apply writes.
	b.Run("tx", func(b *testing.B) {
		g := open(b)
		token := uint64(0)
		for b.Loop() {
			token++
			err := g.DoTx(ctx, "bench", token, func(tx *bbolt.Tx) error {
				bk, err := tx.CreateBucketIfNotExists([]byte("data"))
				if err != nil {
					return err
				}
				return bk.Put([]byte("bench"), []byte("v"))
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	})
}
