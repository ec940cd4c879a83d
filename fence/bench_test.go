package fence_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/fencedio/fenced/fence"
)

func BenchmarkMemoryDo(b *testing.B) {
	ctx := context.Background()
	g := fence.NewMemory(fence.MemoryConfig{})
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
	g := fence.NewMemory(fence.MemoryConfig{})
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
