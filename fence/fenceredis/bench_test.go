package fenceredis_test

import (
	"context"
	"testing"

	"github.com/fencedio/fenced/fence/fenceredis"
)

// BenchmarkSet compares a fenced SET (one EVALSHA that checks, writes and
// records) with a plain SET, one round trip each, on the test Redis.
func BenchmarkSet(b *testing.B) {
	ctx := context.Background()
	c, g, run := setup(b)
	scope := run + "/bench"
	key := fenceredis.Key(scope, "v")
	if err := g.Set(ctx, scope, 1, key, "warm-up", 0); err != nil { // loads the script
		b.Fatal(err)
	}
	b.Run("fenced", func(b *testing.B) {
		for b.Loop() {
			if err := g.Set(ctx, scope, 7, key, "value", 0); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("plain", func(b *testing.B) {
		for b.Loop() {
			if err := c.Set(ctx, key, "value", 0).Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
