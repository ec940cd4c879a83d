package fenceredis_test

import (
	"errors"
	"testing"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fenceredis"
	"github.com/fencedio/fenced/internal/scopetest"
)

// The Redis guard applies fence.ValidateScope before talking to Redis, and
// every valid scope gets its own token key, on a real Redis.
func TestScopeRule(t *testing.T) {
	c, g, run := setup(t)
	ctx := t.Context()
	for _, tc := range scopetest.Cases {
		scope := tc.Scope
		if tc.Valid && len(scope)+len(run) <= fence.MaxScopeBytes {
			scope = run + scope // keys private to this run where the length allows
		}
		key := fenceredis.Key(scope, "v-"+run) // private to this run
		err := g.Set(ctx, scope, 6, key, "x", 0)
		h, hErr := g.Highest(ctx, scope)
		if tc.Valid {
			if err != nil || hErr != nil || h != 6 {
				t.Errorf("%s: Set %v, Highest %d, %v; want accepted and 6", tc.Name, err, h, hErr)
			}
			c.Del(ctx, key, g.TokenKey(scope))
			continue
		}
		if !errors.Is(err, fence.ErrInvalidScope) || !errors.Is(hErr, fence.ErrInvalidScope) {
			t.Errorf("%s: Set %v, Highest %v; want ErrInvalidScope", tc.Name, err, hErr)
		}
		if n, err := c.Exists(ctx, key).Result(); err != nil || n != 0 {
			t.Errorf("%s: key exists %d, %v; want nothing written", tc.Name, n, err)
		}
	}
}
