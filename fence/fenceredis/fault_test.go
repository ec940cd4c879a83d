package fenceredis_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fenceredis"
	"github.com/fencedio/fenced/internal/testenv"
	"github.com/redis/go-redis/v9"
)

// auditScript appends the call's id and token to the scope's log and returns
// the id, so that the log is Redis's own record of every application.
var auditScript = fenceredis.NewScript(`
redis.call('RPUSH', KEYS[1], ARGV[1] .. ' ' .. TOKEN)
return ARGV[1]
`)

// proxied returns a guard whose client talks to Redis through a faultProxy,
// a guard on a direct client with the same prefix, and the run ID.
func proxied(t *testing.T, opts ...redis.Options) (*faultProxy, *fenceredis.Guard, *fenceredis.Guard, *redis.Client, string) {
	t.Helper()
	run := newRunID()
	direct := newClient(t, run)
	p := newFaultProxy(t, testenv.RedisAddr(t))
	o := redis.Options{}
	if len(opts) > 0 {
		o = opts[0]
	}
	o.Addr = p.Addr()
	c := redis.NewClient(&o)
	t.Cleanup(func() { c.Close() })
	cfg := fenceredis.Config{Prefix: "fencetest:" + run + ":"}
	g, err := fenceredis.New(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	rival, err := fenceredis.New(direct, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p, g, rival, direct, run
}

func logOf(t testing.TB, c *redis.Client, key string) []string {
	t.Helper()
	var out []string
	for start := int64(0); ; start += 10000 {
		part, err := c.LRange(context.Background(), key, start, start+9999).Result()
		if err != nil {
			t.Fatalf("LRANGE %s: %v", key, err)
		}
		out = append(out, part...)
		if len(part) < 10000 {
			return out
		}
	}
}

// TestLostReplyIsNotReplayed drops the reply to one script call. go-redis
// re-sends the command on a new connection; the guard must answer the
// re-sent call with the outcome of the first run instead of running the
// mutation again (or, when a rival raised the token in between, calling
// stale a mutation that was applied).
func TestLostReplyIsNotReplayed(t *testing.T) {
	ctx := context.Background()
	p, g, rival, direct, run := proxied(t)
	scope := run + "/lost-reply"
	logKey := fenceredis.Key(scope, "log")

	// Loads the script, so that the dropped reply is the script's own and
	// not a NOSCRIPT answer.
	if _, err := g.Eval(ctx, scope, 1, auditScript, []string{logKey}, "warm"); err != nil {
		t.Fatal(err)
	}

	t.Run("Acknowledged", func(t *testing.T) {
		p.dropNextScriptReply(func() {})
		res, err := g.Eval(ctx, scope, 5, auditScript, []string{logKey}, "a")
		if p.armed() {
			t.Fatal("the proxy dropped no reply")
		}
		if err != nil || res != "a" {
			t.Fatalf("Eval = %v, %v; want a, nil", res, err)
		}
		if n := countEntries(logOf(t, direct, logKey), "a 5"); n != 1 {
			t.Fatalf("the mutation was applied %d times, want once", n)
		}
	})

	t.Run("RivalBeforeRetry", func(t *testing.T) {
		// A rival writes with a higher token after the first run and
		// before go-redis re-sends the call.
		var rivalErr error
		p.dropNextScriptReply(func() {
			_, rivalErr = rival.Eval(ctx, scope, 6, auditScript, []string{logKey}, "rival")
		})
		res, err := g.Eval(ctx, scope, 5, auditScript, []string{logKey}, "b")
		if p.armed() {
			t.Fatal("the proxy dropped no reply")
		}
		if rivalErr != nil {
			t.Fatalf("rival: %v", rivalErr)
		}
		got := logOf(t, direct, logKey)
		if n := countEntries(got, "b 5"); n != 1 {
			t.Fatalf("the mutation was applied %d times, want once (log %q)", n, got)
		}
		if err != nil || res != "b" {
			t.Fatalf("Eval = %v, %v; want b, nil: it was applied (log %q)", res, err, got)
		}
		if h, _ := rival.Highest(ctx, scope); h != 6 {
			t.Fatalf("Highest = %d, want 6", h)
		}
	})

	t.Run("StaleStaysStale", func(t *testing.T) {
		// The replayed answer of a rejected call is the rejection, with
		// the highest token the first run saw.
		p.dropNextScriptReply(func() {
			if _, err := rival.Eval(ctx, scope, 7, auditScript, []string{logKey}, "rival7"); err != nil {
				t.Errorf("rival: %v", err)
			}
		})
		_, err := g.Eval(ctx, scope, 4, auditScript, []string{logKey}, "c")
		var stale *fence.StaleTokenError
		if !errors.As(err, &stale) || stale.Highest != 6 {
			t.Fatalf("Eval = %v; want stale with highest 6 (the first run's answer)", err)
		}
		if n := countEntries(logOf(t, direct, logKey), "c 4"); n != 0 {
			t.Fatalf("a stale mutation was applied %d times", n)
		}
	})
}

func countEntries(log []string, entry string) int {
	n := 0
	for _, e := range log {
		if e == entry {
			n++
		}
	}
	return n
}

// TestConnectionKills cuts every connection between the guard and Redis
// every few milliseconds while writers with interleaved tokens keep
// mutating one scope, and then audits Redis's log of applied mutations
// against what each call reported: an acknowledged call was applied exactly
// once, a stale one never, and one that failed (unknown outcome) at most
// once. It runs for 5 s, or 60 s with FENCED_LONG=1.
func TestConnectionKills(t *testing.T) {
	duration := 5 * time.Second
	if os.Getenv("FENCED_LONG") == "1" {
		duration = 60 * time.Second
	}
	const (
		writers   = 8
		killEvery = 5 * time.Millisecond
	)
	p, g, _, direct, run := proxied(t, redis.Options{PoolSize: writers})
	scope := run + "/kills"
	logKey := fenceredis.Key(scope, "log")

	type outcome int
	const (
		acked outcome = iota
		stale
		failed
	)
	type call struct {
		id    string
		token uint64
		out   outcome
	}

	ctx, cancel := context.WithTimeout(context.Background(), duration)
	defer cancel()
	var kills atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(killEvery)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				kills.Add(int64(p.killAll()))
			}
		}
	})
	var issued atomic.Uint64
	calls := make([][]call, writers)
	for w := range writers {
		wg.Go(func() {
			tok := issued.Add(1)
			for n := 0; ctx.Err() == nil; n++ {
				id := strconv.Itoa(w) + "-" + strconv.Itoa(n)
				res, err := g.Eval(context.Background(), scope, tok, auditScript, []string{logKey}, id)
				c := call{id: id, token: tok}
				switch {
				case err == nil:
					c.out = acked
					if res != id {
						t.Errorf("call %s answered %v", id, res)
					}
				case errors.Is(err, fence.ErrStaleToken):
					c.out = stale
					tok = issued.Add(1)
				default:
					c.out = failed
				}
				calls[w] = append(calls[w], c)
			}
		})
	}
	wg.Wait()

	applied := make(map[string]int)
	for _, e := range logOf(t, direct, logKey) {
		applied[e]++
	}
	var nAcked, nStale, nFailed, nFailedApplied, bad int
	for _, cs := range calls {
		for _, c := range cs {
			entry := fmt.Sprintf("%s %d", c.id, c.token)
			n := applied[entry]
			delete(applied, entry)
			var ok bool
			switch c.out {
			case acked:
				nAcked++
				ok = n == 1
			case stale:
				nStale++
				ok = n == 0
			case failed:
				nFailed++
				nFailedApplied += n
				ok = n <= 1
			}
			if !ok {
				bad++
				if bad <= 10 {
					t.Errorf("call %s (token %d) reported %v, applied %d times", c.id, c.token, []string{"acknowledged", "stale", "failed"}[c.out], n)
				}
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d calls' reported outcomes do not match the log", bad)
	}
	for e, n := range applied {
		t.Errorf("log entry %q (%d times) belongs to no call", e, n)
	}
	t.Logf("%v: %d connections killed; %d calls: %d acknowledged, %d stale, %d failed (%d of them applied); %d mismatches",
		duration, kills.Load(), nAcked+nStale+nFailed, nAcked, nStale, nFailed, nFailedApplied, bad)
	if nAcked == 0 || kills.Load() == 0 {
		t.Fatal("the test exercised nothing")
	}
}

// TestOutcomeKeysExpire checks that every call leaves exactly one outcome
// key, in the scope's hash slot, that expires within the replay window.
func TestOutcomeKeysExpire(t *testing.T) {
	ctx := context.Background()
	const window = 10 * time.Second
	c, g, run := setupWith(t, fenceredis.Config{ReplayWindow: window})
	scope := run + "/outcomes"
	for tok := uint64(1); tok <= 3; tok++ {
		if err := g.Set(ctx, scope, tok, fenceredis.Key(scope, "k"), tok, 0); err != nil {
			t.Fatal(err)
		}
	}
	// A rejection is remembered too.
	if err := g.Set(ctx, scope, 1, fenceredis.Key(scope, "k"), "stale", 0); !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("Set with token 1 after 3 = %v, want stale", err)
	}
	pattern := "fencetest:" + run + ":{" + fenceredis.HashTag(scope) + "}:call:*"
	keys, err := c.Keys(ctx, pattern).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 4 {
		t.Fatalf("%d outcome keys %q, want 4 (one per call)", len(keys), keys)
	}
	for _, k := range keys {
		ttl, err := c.PTTL(ctx, k).Result()
		if err != nil || ttl <= 0 || ttl > window {
			t.Fatalf("outcome key %s expires in %v (%v), want within %v", k, ttl, err, window)
		}
	}
}
