package fence_test

import (
	"context"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"

	"go.etcd.io/bbolt"

	"github.com/fencedio/fenced/fence"
)

func BenchmarkMemoryDo(b *testing.B) {
	ctx := context.Background()
	g := fence.NewMemory()
	token := uint64(0)
	for b.Loop() {
		token++
		if err := g.Do(ctx, "bench", token, nop); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMemoryDoParallel gives each goroutine scopes of its own, as
// distinct lease holders would have, so it measures the shared parts (shard
// lookups), not waiting for one scope.
func BenchmarkMemoryDoParallel(b *testing.B) {
	ctx := context.Background()
	g := fence.NewMemory()
	var next atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		id := strconv.FormatInt(next.Add(1), 10)
		scopes := make([]string, 64)
		for i := range scopes {
			scopes[i] = "worker" + id + "/scope" + strconv.Itoa(i)
		}
		token := uint64(0)
		for i := 0; pb.Next(); i++ {
			token++
			if err := g.Do(ctx, scopes[i%len(scopes)], token, nop); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkBoltDo(b *testing.B) {
	ctx := context.Background()
	open := func(b *testing.B) *fence.Bolt {
		g, err := fence.OpenBolt(filepath.Join(b.TempDir(), "bench.db"))
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
