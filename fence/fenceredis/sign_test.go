package fenceredis_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fenceredis"
	"github.com/fencedio/fenced/internal/signtest"
)

// With a verifier, a token whose signature is missing or wrong changes
// nothing in Redis: neither the data nor the highest token.
func TestSignedTokens(t *testing.T) {
	c, plain, run := setup(t)
	scope := run + "/orders/7"
	key := fenceredis.Key(scope, "data")
	prefix := "fencetest:" + run + ":"
	signtest.CheckGuard(t, scope, func(v *fence.Verifier) signtest.Mutate {
		g, err := fenceredis.New(c, fenceredis.Config{Prefix: prefix, Verifier: v})
		if err != nil {
			t.Fatal(err)
		}
		return func(ctx context.Context, scope string, token uint64) (bool, error) {
			err := g.Set(ctx, scope, token, key, "v"+strconv.FormatUint(token, 10), 0)
			if err != nil {
				return false, err
			}
			got, err := c.Get(ctx, key).Result()
			return got == "v"+strconv.FormatUint(token, 10), err
		}
	}, plain.Highest)
	if got, err := c.Get(context.Background(), key).Result(); err != nil || got != "v12" {
		t.Fatalf("data %q, %v; want the last accepted write v12", got, err)
	}
}
