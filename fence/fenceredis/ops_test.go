package fenceredis_test

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fenceredis"
)

// TestCounterAndHashOps runs Incr, IncrBy, HIncrBy and HDel through the
// guard: accepted tokens change the value as the Redis command would, a
// stale token changes nothing and says why.
func TestCounterAndHashOps(t *testing.T) {
	ctx := context.Background()
	c, g, run := setup(t)
	scope := run + "/counters"
	ctr := fenceredis.Key(scope, "ctr")
	h := fenceredis.Key(scope, "h")

	if n, err := g.Incr(ctx, scope, 5, ctr); err != nil || n != 1 {
		t.Fatalf("Incr = %d, %v; want 1", n, err)
	}
	if n, err := g.IncrBy(ctx, scope, 5, ctr, 41); err != nil || n != 42 {
		t.Fatalf("IncrBy 41 = %d, %v; want 42", n, err)
	}
	if n, err := g.IncrBy(ctx, scope, 6, ctr, -2); err != nil || n != 40 {
		t.Fatalf("IncrBy -2 = %d, %v; want 40", n, err)
	}
	if _, err := g.Incr(ctx, scope, 5, ctr); !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("Incr with token 5 after 6: %v, want stale", err)
	}
	if v, _ := c.Get(ctx, ctr).Int64(); v != 40 {
		t.Fatalf("counter after stale Incr = %d, want 40", v)
	}

	if n, err := g.HIncrBy(ctx, scope, 6, h, "paid", 3); err != nil || n != 3 {
		t.Fatalf("HIncrBy = %d, %v; want 3", n, err)
	}
	if _, err := g.HSet(ctx, scope, 6, h, "a", "1", "b", "2"); err != nil {
		t.Fatal(err)
	}
	if n, err := g.HDel(ctx, scope, 7, h, "a", "missing"); err != nil || n != 1 {
		t.Fatalf("HDel = %d, %v; want 1", n, err)
	}
	var stale *fence.StaleTokenError
	if _, err := g.HDel(ctx, scope, 6, h, "b"); !errors.As(err, &stale) || stale.Highest != 7 {
		t.Fatalf("HDel with token 6 after 7: %v, want stale with highest 7", err)
	}
	if _, err := g.HIncrBy(ctx, scope, 6, h, "paid", 1); !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("HIncrBy with token 6 after 7: %v, want stale", err)
	}
	got, err := c.HGetAll(ctx, h).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got["paid"] != "3" || got["b"] != "2" {
		t.Fatalf("hash = %v, want paid=3 b=2", got)
	}
	if _, err := g.HDel(ctx, scope, 7, h); err == nil {
		t.Fatal("HDel without fields: no error")
	}
}

// TestOpsFailureRecordsNothing checks that a command Redis refuses (a value
// that is not an integer, an overflow) leaves the value and the highest
// token as they were.
func TestOpsFailureRecordsNothing(t *testing.T) {
	ctx := context.Background()
	c, g, run := setup(t)
	scope := run + "/fail"
	text := fenceredis.Key(scope, "text")
	big := fenceredis.Key(scope, "big")
	if err := g.Set(ctx, scope, 3, text, "not a number", 0); err != nil {
		t.Fatal(err)
	}
	if err := g.Set(ctx, scope, 3, big, math.MaxInt64, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Incr(ctx, scope, 9, text); err == nil || errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("Incr of a string: %v, want a Redis error", err)
	}
	if _, err := g.Incr(ctx, scope, 9, big); err == nil {
		t.Fatal("Incr past MaxInt64: no error")
	}
	if _, err := g.HIncrBy(ctx, scope, 9, text, "f", 1); err == nil {
		t.Fatal("HIncrBy of a string key: no error")
	}
	if h, err := g.Highest(ctx, scope); err != nil || h != 3 {
		t.Fatalf("Highest after refused commands = %d, %v; want 3", h, err)
	}
	if v, _ := c.Get(ctx, big).Int64(); v != math.MaxInt64 {
		t.Fatalf("big = %d after refused Incr", v)
	}
}

// lease is a fence.Lease that counts its losses.
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

// TestLeaseGuard checks that every mutation of a LeaseGuard uses the lease's
// scope and token, and that a stale rejection, and only that, reaches MarkLost.
func TestLeaseGuard(t *testing.T) {
	ctx := context.Background()
	c, g, run := setup(t)
	scope := run + "/leased"
	old := &lease{key: scope, token: 10}
	cur := &lease{key: scope, token: 11}
	lo, lc := g.WithLease(old), g.WithLease(cur)
	if k := lc.Key("x"); k != fenceredis.Key(scope, "x") {
		t.Fatalf("Key = %q", k)
	}

	if err := lo.Set(ctx, lo.Key("s"), "old", 0); err != nil {
		t.Fatal(err)
	}
	if err := lc.Set(ctx, lc.Key("s"), "new", 0); err != nil {
		t.Fatal(err)
	}
	calls := map[string]func(*fenceredis.LeaseGuard) error{
		"Set":     func(lg *fenceredis.LeaseGuard) error { return lg.Set(ctx, lg.Key("s"), "v", 0) },
		"Del":     func(lg *fenceredis.LeaseGuard) error { _, err := lg.Del(ctx, lg.Key("s")); return err },
		"HSet":    func(lg *fenceredis.LeaseGuard) error { _, err := lg.HSet(ctx, lg.Key("h"), "f", "v"); return err },
		"HDel":    func(lg *fenceredis.LeaseGuard) error { _, err := lg.HDel(ctx, lg.Key("h"), "f"); return err },
		"Incr":    func(lg *fenceredis.LeaseGuard) error { _, err := lg.Incr(ctx, lg.Key("n")); return err },
		"IncrBy":  func(lg *fenceredis.LeaseGuard) error { _, err := lg.IncrBy(ctx, lg.Key("n"), 2); return err },
		"HIncrBy": func(lg *fenceredis.LeaseGuard) error { _, err := lg.HIncrBy(ctx, lg.Key("hn"), "f", 2); return err },
		"Eval": func(lg *fenceredis.LeaseGuard) error {
			_, err := lg.Eval(ctx, fenceredis.NewScript(`return redis.call('SET', KEYS[1], TOKEN)`), []string{lg.Key("e")})
			return err
		},
	}
	for name, call := range calls {
		before := len(old.losses())
		err := call(lo)
		var stale *fence.StaleTokenError
		if !errors.As(err, &stale) || stale.Presented != 10 || stale.Highest != 11 {
			t.Errorf("%s with the old lease: %v, want stale 10 < 11", name, err)
		}
		if ls := old.losses(); len(ls) != before+1 || !errors.Is(ls[len(ls)-1], fence.ErrStaleToken) {
			t.Errorf("%s with the old lease: MarkLost calls %v, want one more, stale", name, ls)
		}
		if err := call(lc); err != nil {
			t.Errorf("%s with the current lease: %v", name, err)
		}
	}
	if ls := cur.losses(); len(ls) != 0 {
		t.Errorf("current lease was told it is lost: %v", ls)
	}
	if v, _ := c.Get(ctx, lc.Key("e")).Result(); v != "11" {
		t.Errorf("Eval wrote %q, want the current token 11", v)
	}
}
