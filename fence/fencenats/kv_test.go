package fencenats_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencenats"
)

func TestKey(t *testing.T) {
	for scope, want := range map[string]string{
		"orders/7":  "orders/7",
		"a.b":       "a=2Eb",
		"x=y":       "x=3Dy",
		"* >":       "=2A=20=3E",
		"é":         "=C3=A9",
		"Job_1-2/3": "Job_1-2/3",
	} {
		if got := fencenats.Key(scope); got != want {
			t.Errorf("Key(%q) = %q, want %q", scope, got, want)
		}
	}
}

func TestKVDecisions(t *testing.T) {
	js := jetStream(t)
	kv := bucket(t, js)
	var decisions []fence.Decision
	var mu sync.Mutex
	g, err := fencenats.NewKV(kv, fencenats.Config{Observer: fence.ObserverFunc(func(_ context.Context, d fence.Decision) {
		mu.Lock()
		decisions = append(decisions, d)
		mu.Unlock()
	})})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	seq := func(q uint64) context.Context { return fence.WithSequence(ctx, q) }
	for _, tc := range []struct {
		name  string
		ctx   context.Context
		token uint64
		value string
		err   error
	}{
		{"first", ctx, 5, "v1", nil},
		{"equal token", ctx, 5, "v2", nil},
		{"higher", ctx, 7, "v3", nil},
		{"stale", ctx, 6, "x", fence.ErrStaleToken},
		{"sequenced", seq(1), 7, "v4", nil},
		{"duplicate", seq(1), 7, "x", fence.ErrDuplicate},
		{"next sequence", seq(3), 7, "v5", nil},
		{"new epoch, any sequence", seq(9), 8, "v6", nil},
		{"no token", ctx, 0, "x", fence.ErrNoToken},
	} {
		err := g.Put(tc.ctx, "orders/7", tc.token, []byte(tc.value))
		if (tc.err == nil) != (err == nil) || (tc.err != nil && !errors.Is(err, tc.err)) {
			t.Fatalf("%s: Put = %v, want %v", tc.name, err, tc.err)
		}
	}
	e, err := g.Get(ctx, "orders/7")
	if err != nil || string(e.Value) != "v6" || e.Token != 8 || e.Sequence != 9 || e.Revision == 0 {
		t.Fatalf("Get = %+v, %v", e, err)
	}
	raw, err := kv.Get(ctx, "orders/7")
	if err != nil || string(raw.Value()) != "8:9\nv6" {
		t.Fatalf("raw entry %q, %v; want %q", raw.Value(), err, "8:9\nv6")
	}
	var stale *fence.StaleTokenError
	if err := g.Put(ctx, "orders/7", 2, nil); !errors.As(err, &stale) || stale.Highest != 8 || stale.Presented != 2 {
		t.Fatalf("stale = %v", err)
	}
	if h, err := g.Highest(ctx, "other"); err != nil || h != 0 {
		t.Fatalf("Highest(other) = %d, %v", h, err)
	}
	// A value not written by a guard is refused, not overwritten.
	if _, err := kv.Put(ctx, "corrupt", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if err := g.Put(ctx, "corrupt", 99, []byte("x")); !errors.Is(err, fencenats.ErrCorruptEntry) {
		t.Fatalf("Put over a foreign entry = %v", err)
	}
	// A deleted entry starts afresh.
	if err := kv.Delete(ctx, "orders/7"); err != nil {
		t.Fatal(err)
	}
	if err := g.Put(ctx, "orders/7", 1, []byte("again")); err != nil {
		t.Fatalf("Put after delete = %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	var accepted, rejected, dup int
	for _, d := range decisions {
		switch {
		case d.Accepted:
			accepted++
		case d.Duplicate:
			dup++
		default:
			rejected++
		}
	}
	if accepted != 7 || rejected != 2 || dup != 1 {
		t.Fatalf("observed %d accepted, %d stale, %d duplicates; want 7, 2, 1", accepted, rejected, dup)
	}
}

// Concurrent writers race on one entry: every increment under a current
// token lands exactly once, and once a higher token is stored, no lower
// one is.
func TestKVConcurrent(t *testing.T) {
	js := jetStream(t)
	g, err := fencenats.NewKV(bucket(t, js), fencenats.Config{Attempts: 1000})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	incr := func(token uint64) error {
		return g.Update(ctx, "counter", token, func(v []byte) ([]byte, error) {
			n, _ := strconv.Atoi(string(v))
			return []byte(strconv.Itoa(n + 1)), nil
		})
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	okLow, staleLow := 0, 0
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				token := uint64(10)
				if w == 0 {
					token = 9 // an older holder, refused once 10 is stored
				}
				err := incr(token)
				mu.Lock()
				switch {
				case err == nil && token == 9:
					okLow++
				case errors.Is(err, fence.ErrStaleToken) && token == 9:
					staleLow++
				case err != nil:
					t.Errorf("token %d: %v", token, err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	e, err := g.Get(ctx, "counter")
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprint(60 + okLow); string(e.Value) != want || e.Token != 10 {
		t.Fatalf("counter %s token %d, want %s token 10 (token 9: %d applied, %d stale)", e.Value, e.Token, want, okLow, staleLow)
	}
}

func TestKVDo(t *testing.T) {
	js := jetStream(t)
	g, err := fencenats.NewKV(bucket(t, js), fencenats.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	app := func(s string) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			fencenats.SetValue(ctx, append(fencenats.Value(ctx), s...))
			return nil
		}
	}
	if err := g.Do(ctx, "log", 3, app("a")); err != nil {
		t.Fatal(err)
	}
	if err := g.Do(ctx, "log", 3, app("b")); err != nil {
		t.Fatal(err)
	}
	if err := g.Do(ctx, "log", 2, app("c")); !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("stale Do = %v", err)
	}
	boom := errors.New("boom")
	if err := g.Do(ctx, "log", 4, func(context.Context) error { return boom }); err != boom {
		t.Fatalf("failing Do = %v", err)
	}
	if err := g.Do(ctx, "log", 3, func(context.Context) error { return nil }); err != nil {
		t.Fatalf("Do without SetValue = %v", err)
	}
	e, err := g.Get(ctx, "log")
	if err != nil || string(e.Value) != "ab" || e.Token != 3 {
		t.Fatalf("Get = %+v, %v; want ab under token 3 (a failed apply records nothing)", e, err)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []fencenats.Config{{Attempts: -1}, {KeyPrefix: ".a"}, {KeyPrefix: "a*"}, {KeyPrefix: "a..b"}} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v: Validate accepted it", c)
		}
	}
	if err := (fencenats.Config{KeyPrefix: "fence."}).Validate(); err != nil {
		t.Error(err)
	}
}
