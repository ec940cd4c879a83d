package fenceredis_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fenceredis"
	"github.com/fencedio/fenced/internal/seqstress"
	"github.com/redis/go-redis/v9"
)

type seqStep struct {
	token, seq uint64
	want       error
}

var seqScenarios = []struct {
	name   string
	strict bool
	steps  []seqStep
}{
	{"no sequence", false, []seqStep{{5, 0, nil}, {5, 0, nil}, {4, 0, fence.ErrStaleToken}, {6, 0, nil}}},
	{"in order", false, []seqStep{{5, 1, nil}, {5, 2, nil}, {5, 7, nil}}},
	{"duplicate", false, []seqStep{{5, 1, nil}, {5, 2, nil}, {5, 2, fence.ErrDuplicate}, {5, 1, fence.ErrDuplicate}, {5, 3, nil}}},
	{"new epoch", false, []seqStep{{5, 9, nil}, {6, 1, nil}, {6, 1, fence.ErrDuplicate}, {5, 10, fence.ErrStaleToken}}},
	{"new epoch without sequence forgets the last", false, []seqStep{{5, 9, nil}, {6, 0, nil}, {6, 1, nil}}},
	{"same epoch without sequence keeps the last", false, []seqStep{{5, 9, nil}, {5, 0, nil}, {5, 9, fence.ErrDuplicate}}},
	{"digits carry", true, []seqStep{{5, 9, nil}, {5, 10, nil}, {5, 99, fence.ErrSequenceGap}, {5, 11, nil}}},
	{"large sequences", false, []seqStep{{5, fence.MaxSequence - 1, nil}, {5, fence.MaxSequence, nil}, {5, fence.MaxSequence, fence.ErrDuplicate}}},
	{"gap refused when strict", true, []seqStep{{5, 4, nil}, {5, 6, fence.ErrSequenceGap}, {5, 5, nil}, {5, 5, fence.ErrDuplicate}, {5, 6, nil}, {6, 3, nil}}},
}

func TestSequences(t *testing.T) {
	for _, sc := range seqScenarios {
		t.Run(sc.name, func(t *testing.T) {
			rec := &recorder{}
			c, g, run := setupWith(t, fenceredis.Config{Observer: rec, StrictSequences: sc.strict})
			scope := run + "/s"
			counter := fenceredis.Key(scope, "n")
			t.Cleanup(func() { c.Del(context.Background(), counter) })
			wantApplied, wantDups := 0, 0
			for i, st := range sc.steps {
				ctx := fence.WithSequence(context.Background(), st.seq)
				_, err := g.Incr(ctx, scope, st.token, counter)
				if st.want == nil && err != nil || st.want != nil && !errors.Is(err, st.want) {
					t.Fatalf("step %d (token %d seq %d): %v, want %v", i, st.token, st.seq, err, st.want)
				}
				if st.want == nil {
					wantApplied++
				}
				if st.want == fence.ErrDuplicate {
					wantDups++
					var dup *fence.DuplicateError
					if !errors.As(err, &dup) || dup.Last < st.seq || dup.Token != st.token {
						t.Fatalf("step %d: %#v", i, err)
					}
				}
			}
			n, err := c.Get(context.Background(), counter).Int()
			if err != nil || n != wantApplied {
				t.Errorf("counter = %d (%v), want %d applied writes", n, err, wantApplied)
			}
			accepted, dups := 0, 0
			for _, d := range rec.take() {
				if d.Accepted {
					accepted++
				}
				if d.Duplicate {
					dups++
				}
			}
			if accepted != wantApplied || dups != wantDups {
				t.Errorf("observer: %d accepted, %d duplicates; want %d, %d", accepted, dups, wantApplied, wantDups)
			}
		})
	}
}

// A scope written before sequences existed (no sequence key) takes
// sequences, and the sequence key is refused as a data key.
func TestSequenceKey(t *testing.T) {
	c, g, run := setup(t)
	ctx := context.Background()
	scope := run + "/k"
	if err := g.Set(ctx, scope, 3, fenceredis.Key(scope, "v"), "a", 0); err != nil {
		t.Fatal(err)
	}
	if err := g.Set(fence.WithSequence(ctx, 1), scope, 3, fenceredis.Key(scope, "v"), "b", 0); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Get(ctx, g.SequenceKey(scope)).Result(); err != nil || v != "3:"+strconv.Itoa(1) {
		t.Fatalf("sequence key = %q, %v", v, err)
	}
	err := g.Set(ctx, scope, 3, g.SequenceKey(scope), "x", 0)
	if !errors.Is(err, fenceredis.ErrKeyOutsideScope) {
		t.Fatalf("writing the sequence key: %v", err)
	}
	// A corrupt sequence key is an error, never a decision.
	if err := c.Set(ctx, g.SequenceKey(scope), "junk", 0).Err(); err != nil {
		t.Fatal(err)
	}
	err = g.Set(fence.WithSequence(ctx, 2), scope, 3, fenceredis.Key(scope, "v"), "c", 0)
	if err == nil || errors.Is(err, fence.ErrDuplicate) || errors.Is(err, fence.ErrUnknownOutcome) {
		t.Fatalf("corrupt sequence key: %v", err)
	}
	c.Del(ctx, fenceredis.Key(scope, "v"), g.TokenKey(scope), g.SequenceKey(scope))
}

// seqAuditScript appends "token sequence" to the scope's log: Redis's own
// record of every application.
var seqAuditScript = fenceredis.NewScript(`
redis.call('RPUSH', KEYS[1], TOKEN .. ' ' .. ARGV[1])
return 1
`)

// The guard stress with sequences: writers retry, with the same sequence,
// every write whose answer a connection kill or their own cut deadline
// lost; each (token, sequence) lands at most once, each acknowledged one
// exactly once.
func TestSequenceStress(t *testing.T) {
	duration := 3 * time.Second
	if os.Getenv("FENCED_LONG") == "1" {
		duration = 30 * time.Second
	}
	p, g, _, direct, run := proxied(t, redis.Options{PoolSize: 8})
	scope := run + "/seqstress"
	logKey := fenceredis.Key(scope, "log")
	write := func(ctx context.Context, token uint64) error {
		_, err := g.Eval(ctx, scope, token, seqAuditScript, []string{logKey}, fence.SequenceFromContext(ctx))
		return err
	}
	applied := func() map[seqstress.Key]int {
		m := map[seqstress.Key]int{}
		for _, e := range logOf(t, direct, logKey) {
			var k seqstress.Key
			if _, err := fmt.Sscanf(e, "%d %d", &k.Token, &k.Seq); err != nil {
				t.Fatalf("log entry %q: %v", e, err)
			}
			m[k]++
		}
		return m
	}
	kill := func(ctx context.Context) int {
		n := 0
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return n
			case <-tick.C:
				n += p.killAll()
			}
		}
	}
	res := seqstress.Run(t, seqstress.Config{Writers: 6, Duration: duration, CutShare: 0.2, Cut: 300 * time.Microsecond,
		Timeout: 5 * time.Second, Attempts: 20, Reacquire: 20 * time.Millisecond, Fault: kill}, write, applied)
	t.Log(res)
	if res.Faults == 0 || res.Duplicates == 0 {
		t.Errorf("the stress exercised nothing: %v", res)
	}
	direct.Del(context.Background(), logKey)
}
