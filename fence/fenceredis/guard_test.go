package fenceredis_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fenceredis"
	"github.com/redis/go-redis/v9"
)

// mutation is one kind of guarded write, described so that one table can
// drive them all: prepare puts the data in a known state, apply writes with
// a token, and state reads back what a test can compare.
type mutation struct {
	name    string
	prepare func(ctx context.Context, c *redis.Client, key string) error
	apply   func(ctx context.Context, g *fenceredis.Guard, scope string, token uint64, key string) error
	state   func(ctx context.Context, c *redis.Client, key string) (string, error)
	// want is the state after an accepted apply with token.
	want func(token uint64) string
}

var echoTokenScript = fenceredis.NewScript(`
redis.call('SET', KEYS[1], 'eval-' .. TOKEN .. '-' .. ARGV[1])
return TOKEN
`)

func mutations() []mutation {
	getString := func(ctx context.Context, c *redis.Client, key string) (string, error) {
		v, err := c.Get(ctx, key).Result()
		if errors.Is(err, redis.Nil) {
			return "<absent>", nil
		}
		return v, err
	}
	return []mutation{
		{
			name: "Set",
			apply: func(ctx context.Context, g *fenceredis.Guard, scope string, token uint64, key string) error {
				return g.Set(ctx, scope, token, key, fmt.Sprintf("set-%d", token), 0)
			},
			state: getString,
			want:  func(token uint64) string { return fmt.Sprintf("set-%d", token) },
		},
		{
			name: "SetWithTTL",
			apply: func(ctx context.Context, g *fenceredis.Guard, scope string, token uint64, key string) error {
				return g.Set(ctx, scope, token, key, fmt.Sprintf("ttl-%d", token), time.Hour)
			},
			state: func(ctx context.Context, c *redis.Client, key string) (string, error) {
				v, err := getString(ctx, c, key)
				if err != nil || v == "<absent>" {
					return v, err
				}
				ttl, err := c.PTTL(ctx, key).Result()
				if err != nil {
					return "", err
				}
				return fmt.Sprintf("%s expires=%t", v, ttl > 0 && ttl <= time.Hour), nil
			},
			want: func(token uint64) string { return fmt.Sprintf("ttl-%d expires=true", token) },
		},
		{
			name: "Del",
			prepare: func(ctx context.Context, c *redis.Client, key string) error {
				return c.Set(ctx, key, "present", 0).Err()
			},
			apply: func(ctx context.Context, g *fenceredis.Guard, scope string, token uint64, key string) error {
				n, err := g.Del(ctx, scope, token, key)
				if err == nil && n != 1 {
					return fmt.Errorf("Del deleted %d keys, want 1", n)
				}
				return err
			},
			state: getString,
			want:  func(uint64) string { return "<absent>" },
		},
		{
			name: "HSet",
			apply: func(ctx context.Context, g *fenceredis.Guard, scope string, token uint64, key string) error {
				_, err := g.HSet(ctx, scope, token, key, "token", token, "kind", "hset")
				return err
			},
			state: func(ctx context.Context, c *redis.Client, key string) (string, error) {
				m, err := c.HGetAll(ctx, key).Result()
				return fmt.Sprint(m), err
			},
			want: func(token uint64) string {
				return fmt.Sprint(map[string]string{"kind": "hset", "token": strconv.FormatUint(token, 10)})
			},
		},
		{
			name: "Eval",
			apply: func(ctx context.Context, g *fenceredis.Guard, scope string, token uint64, key string) error {
				res, err := g.Eval(ctx, scope, token, echoTokenScript, []string{key}, "x")
				if err == nil && res != strconv.FormatUint(token, 10) {
					return fmt.Errorf("Eval returned %#v, want the token %d", res, token)
				}
				return err
			},
			state: getString,
			want:  func(token uint64) string { return fmt.Sprintf("eval-%d-x", token) },
		},
	}
}

func TestMutationsAcceptAndReject(t *testing.T) {
	steps := []struct {
		token  uint64
		accept bool
	}{
		{10, true},
		{10, true}, // the holder writes again with its token
		{9, false},
		{11, true},
		{10, false},
		{1, false},
		{12, true},
	}
	for _, m := range mutations() {
		t.Run(m.name, func(t *testing.T) {
			ctx := context.Background()
			obs := &recorder{}
			c, g, run := setupWith(t, fenceredis.Config{Observer: obs})
			scope := run + "/orders/7"
			key := fenceredis.Key(scope, "data")
			var highest uint64
			for i, st := range steps {
				if m.prepare != nil {
					if err := m.prepare(ctx, c, key); err != nil {
						t.Fatalf("step %d: prepare: %v", i, err)
					}
				}
				before, err := m.state(ctx, c, key)
				if err != nil {
					t.Fatalf("step %d: state: %v", i, err)
				}
				err = m.apply(ctx, g, scope, st.token, key)
				after, serr := m.state(ctx, c, key)
				if serr != nil {
					t.Fatalf("step %d: state: %v", i, serr)
				}
				if st.accept {
					if err != nil {
						t.Fatalf("step %d: token %d (highest %d): %v, want accepted", i, st.token, highest, err)
					}
					if want := m.want(st.token); after != want {
						t.Errorf("step %d: after accepted token %d: state %q, want %q", i, st.token, after, want)
					}
				} else {
					var stale *fence.StaleTokenError
					if !errors.As(err, &stale) || !errors.Is(err, fence.ErrStaleToken) {
						t.Fatalf("step %d: token %d (highest %d): err = %v, want *fence.StaleTokenError", i, st.token, highest, err)
					}
					want := fence.StaleTokenError{Scope: scope, Presented: st.token, Highest: highest}
					if *stale != want {
						t.Errorf("step %d: %+v, want %+v", i, *stale, want)
					}
					if after != before {
						t.Errorf("step %d: rejected token %d changed state from %q to %q", i, st.token, before, after)
					}
				}
				wantDecision := fence.Decision{Scope: scope, Presented: st.token, Highest: highest, Accepted: st.accept}
				if ds := obs.take(); len(ds) != 1 || ds[0] != wantDecision {
					t.Errorf("step %d: observer saw %+v, want [%+v]", i, ds, wantDecision)
				}
				if st.accept {
					highest = max(highest, st.token)
				}
				got, err := g.Highest(ctx, scope)
				if err != nil || got != highest {
					t.Fatalf("step %d: Highest = %d, %v; want %d", i, got, err, highest)
				}
			}
		})
	}
}

// TestRefusedBeforeRedis checks that every invalid call is refused before a
// connection is even dialled.
func TestRefusedBeforeRedis(t *testing.T) {
	ctx := context.Background()
	run := newRunID()
	log := &cmdLog{}
	c := newClient(t, run, log)
	g, err := fenceredis.New(c, fenceredis.Config{Prefix: "fencetest:" + run + ":"})
	if err != nil {
		t.Fatal(err)
	}
	scope := run + "/s"
	other := run + "/other"
	good := fenceredis.Key(scope, "k")
	outside := []string{
		"plain-" + run,                             // no hash tag: hashed whole
		fenceredis.Key(other, "k"),                 // another scope
		fenceredis.Key(scope, "a{b"),               // '{' in name moves the tag
		"{}" + fenceredis.Key(scope, "k"),          // empty first tag: hashed whole
		"k{" + fenceredis.HashTag(scope),           // unclosed tag
		"k{" + fenceredis.HashTag(scope) + "x}",    // longer tag
		"k{" + fenceredis.HashTag(scope)[1:] + "}", // shorter tag
		g.TokenKey(scope),                          // the guard's own record
	}
	type call struct {
		name string
		do   func() error
		want error // matched with errors.Is; nil means any error
	}
	var calls []call
	for _, m := range mutations() {
		calls = append(calls,
			call{m.name + "/token0", func() error { return m.apply(ctx, g, scope, 0, good) }, fence.ErrNoToken},
			call{m.name + "/emptyScope", func() error { return m.apply(ctx, g, "", 5, good) }, fence.ErrInvalidScope},
		)
		for i, k := range outside {
			calls = append(calls, call{fmt.Sprintf("%s/outside%d", m.name, i),
				func() error { return m.apply(ctx, g, scope, 5, k) }, fenceredis.ErrKeyOutsideScope})
		}
	}
	calls = append(calls,
		call{"Del/secondKeyOutside", func() error {
			_, err := g.Del(ctx, scope, 5, good, fenceredis.Key(other, "k"))
			return err
		}, fenceredis.ErrKeyOutsideScope},
		call{"Eval/secondKeyOutside", func() error {
			_, err := g.Eval(ctx, scope, 5, echoTokenScript, []string{good, "plain"})
			return err
		}, fenceredis.ErrKeyOutsideScope},
		call{"Del/noKeys", func() error { _, err := g.Del(ctx, scope, 5); return err }, nil},
		call{"HSet/oddPairs", func() error { _, err := g.HSet(ctx, scope, 5, good, "f"); return err }, nil},
		call{"HSet/noPairs", func() error { _, err := g.HSet(ctx, scope, 5, good); return err }, nil},
		call{"Set/subMillisecondTTL", func() error { return g.Set(ctx, scope, 5, good, "v", time.Microsecond) }, nil},
		call{"Set/negativeTTL", func() error { return g.Set(ctx, scope, 5, good, "v", -2*time.Second) }, nil},
		call{"Eval/nilScript", func() error { _, err := g.Eval(ctx, scope, 5, nil, []string{good}); return err }, nil},
		call{"Highest/emptyScope", func() error { _, err := g.Highest(ctx, ""); return err }, fence.ErrInvalidScope},
	)
	for _, tc := range calls {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.do()
			if err == nil {
				t.Fatal("accepted, want an error")
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if errors.Is(err, fence.ErrStaleToken) {
				t.Fatalf("err = %v: refused input must not look like a stale token", err)
			}
			if cmds, dials := log.reset(); len(cmds) != 0 || dials != 0 {
				t.Fatalf("sent %v over %d new connections, want nothing sent", cmds, dials)
			}
		})
	}
	// The same client does reach Redis with valid input, so the silence
	// above is the guard's doing.
	if err := g.Set(ctx, scope, 5, good, "v", 0); err != nil {
		t.Fatal(err)
	}
	if cmds, _ := log.reset(); len(cmds) == 0 {
		t.Fatal("a valid Set sent no command; the hook does not see commands")
	}
}

// TestBigTokens crosses the points where a double-based comparison would go
// wrong: 2^53 (the last integer a double holds exactly), lengths in digits
// (where "10" < "9" as plain strings) and 2^64-1.
func TestBigTokens(t *testing.T) {
	const p53 = uint64(1) << 53
	steps := []struct {
		token  uint64
		accept bool
	}{
		{9, true},
		{10, true},
		{9, false},
		{p53, true},
		{p53 + 1, true},
		{p53, false}, // equal to p53+1 as a double
		{p53 + 1, true},
		{99_999_999_999_999_999, true},
		{100_000_000_000_000_000, true},
		{99_999_999_999_999_999, false},
		{math.MaxUint64 - 1, true},
		{math.MaxUint64 - 2, false},
		{math.MaxUint64, true},
		{math.MaxUint64 - 1, false},
		{1 << 63, false},
		{math.MaxUint64, true},
	}
	ctx := context.Background()
	c, g, run := setup(t)
	scope := run + "/big"
	key := fenceredis.Key(scope, "v")
	var highest uint64
	for i, st := range steps {
		err := g.Set(ctx, scope, st.token, key, st.token, 0)
		if st.accept {
			if err != nil {
				t.Fatalf("step %d: token %d (highest %d): %v, want accepted", i, st.token, highest, err)
			}
			highest = st.token
		} else {
			var stale *fence.StaleTokenError
			if !errors.As(err, &stale) {
				t.Fatalf("step %d: token %d (highest %d): err = %v, want stale", i, st.token, highest, err)
			}
			if stale.Presented != st.token || stale.Highest != highest {
				t.Fatalf("step %d: %+v, want presented %d highest %d", i, stale, st.token, highest)
			}
		}
		got, err := g.Highest(ctx, scope)
		if err != nil || got != highest {
			t.Fatalf("step %d: Highest = %d, %v; want %d", i, got, err, highest)
		}
		v, err := c.Get(ctx, key).Result()
		if err != nil || v != strconv.FormatUint(highest, 10) {
			t.Fatalf("step %d: data = %q, %v; want %d", i, v, err, highest)
		}
	}
	// The body sees the token exactly, too.
	res, err := g.Eval(ctx, scope, math.MaxUint64, echoTokenScript, []string{key}, "max")
	if err != nil || res != "18446744073709551615" {
		t.Fatalf("Eval TOKEN = %#v, %v; want 18446744073709551615", res, err)
	}
}

// TestCorruptHighest checks that a token key holding something other than a
// token stops every mutation instead of being read as some number.
func TestCorruptHighest(t *testing.T) {
	for _, bad := range []string{"abc", "0", "042", "-5", "1.5", "1e3", "18446744073709551616", "99999999999999999999", "7 "} {
		t.Run(bad, func(t *testing.T) {
			ctx := context.Background()
			c, g, run := setup(t)
			scope := run + "/corrupt"
			key := fenceredis.Key(scope, "v")
			if err := c.Set(ctx, g.TokenKey(scope), bad, 0).Err(); err != nil {
				t.Fatal(err)
			}
			err := g.Set(ctx, scope, math.MaxUint64, key, "v", 0)
			if err == nil || errors.Is(err, fence.ErrStaleToken) {
				t.Fatalf("Set over corrupt highest %q: err = %v, want a non-stale error", bad, err)
			}
			if n, err := c.Exists(ctx, key).Result(); err != nil || n != 0 {
				t.Fatalf("data key exists = %d, %v; want nothing written", n, err)
			}
			if v, err := c.Get(ctx, g.TokenKey(scope)).Result(); err != nil || v != bad {
				t.Fatalf("token key = %q, %v; want %q untouched", v, err, bad)
			}
			if _, err := g.Highest(ctx, scope); err == nil {
				t.Fatalf("Highest over corrupt %q: no error", bad)
			}
		})
	}
}

// TestScopesWithBraces checks scopes that cannot be used as hash tags as
// they are, and that escaping keeps distinct scopes apart (I6).
func TestScopesWithBraces(t *testing.T) {
	ctx := context.Background()
	c, g, run := setup(t)
	scopes := []string{"a}b", "a%7Db", "a{b", "a%7Bb", "{", "}", "%", "{}", "x{y}z"}
	for i, s := range scopes {
		scope := run + "/" + s
		tag := fenceredis.HashTag(scope)
		if strings.ContainsAny(tag, "{}") {
			t.Fatalf("HashTag(%q) = %q contains a brace", scope, tag)
		}
		// Each scope gets a different token; if two shared a record the
		// lower one would be refused.
		token := uint64(100 - i)
		key := fenceredis.Key(scope, "v")
		if err := g.Set(ctx, scope, token, key, s, 0); err != nil {
			t.Fatalf("scope %q: %v", scope, err)
		}
		if v, err := c.Get(ctx, key).Result(); err != nil || v != s {
			t.Fatalf("scope %q: data %q, %v", scope, v, err)
		}
		if !strings.Contains(g.TokenKey(scope), "{"+tag+"}") {
			t.Fatalf("TokenKey(%q) = %q lacks tag {%s}", scope, g.TokenKey(scope), tag)
		}
	}
	for i, s := range scopes {
		scope := run + "/" + s
		if h, err := g.Highest(ctx, scope); err != nil || h != uint64(100-i) {
			t.Fatalf("Highest(%q) = %d, %v; want %d", scope, h, err, 100-i)
		}
		// A key of one scope is refused under its look-alike.
		for j, o := range scopes {
			if j == i {
				continue
			}
			err := g.Set(ctx, scope, 1000, fenceredis.Key(run+"/"+o, "v"), "x", 0)
			if !errors.Is(err, fenceredis.ErrKeyOutsideScope) {
				t.Fatalf("key of %q under scope %q: err = %v, want ErrKeyOutsideScope", o, s, err)
			}
		}
	}
}

func TestHashTagIsInjective(t *testing.T) {
	inputs := []string{"", "a", "%", "%25", "%2525", "{", "%7B", "%7b", "}", "%7D", "{}", "%7B%7D", "a}b", "a%7Db", "a{b}c"}
	seen := map[string]string{}
	for _, s := range inputs {
		tag := fenceredis.HashTag(s)
		if prev, dup := seen[tag]; dup {
			t.Fatalf("HashTag(%q) = HashTag(%q) = %q", s, prev, tag)
		}
		seen[tag] = s
		if strings.ContainsAny(tag, "{}") {
			t.Fatalf("HashTag(%q) = %q contains a brace", s, tag)
		}
	}
	if got := fenceredis.Key("orders/7", "order"); got != "order{orders/7}" {
		t.Fatalf("Key = %q", got)
	}
}

func TestScriptBody(t *testing.T) {
	ctx := context.Background()
	c, g, run := setup(t)
	scope := run + "/script"
	k1, k2 := fenceredis.Key(scope, "one"), fenceredis.Key(scope, "two")

	t.Run("KeysArgvToken", func(t *testing.T) {
		s := fenceredis.NewScript(`return {KEYS[1], KEYS[2], #KEYS, ARGV[1], ARGV[2], #ARGV, TOKEN}`)
		res, err := g.Eval(ctx, scope, 5, s, []string{k1, k2}, "a1", 2)
		if err != nil {
			t.Fatal(err)
		}
		want := []any{k1, k2, int64(2), "a1", "2", int64(2), "5"}
		if !reflect.DeepEqual(res, want) {
			t.Fatalf("body saw %#v, want %#v", res, want)
		}
	})

	t.Run("NoKeysNoResult", func(t *testing.T) {
		s := fenceredis.NewScript(`local unused = #KEYS`)
		res, err := g.Eval(ctx, scope, 6, s, nil)
		if err != nil || res != nil {
			t.Fatalf("Eval = %#v, %v; want nil, nil", res, err)
		}
		if h, _ := g.Highest(ctx, scope); h != 6 {
			t.Fatalf("Highest = %d, want 6: a body without keys still records its token", h)
		}
	})

	t.Run("ErrorReplyAborts", func(t *testing.T) {
		s := fenceredis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then
	return redis.error_reply('NOTFOUND order missing')
end
redis.call('SET', KEYS[1], 'updated')`)
		_, err := g.Eval(ctx, scope, 50, s, []string{fenceredis.Key(scope, "missing")})
		if err == nil || !strings.Contains(err.Error(), "order missing") || errors.Is(err, fence.ErrStaleToken) {
			t.Fatalf("err = %v, want the body's error", err)
		}
		if h, _ := g.Highest(ctx, scope); h != 6 {
			t.Fatalf("Highest = %d, want 6: an aborted body must not record its token", h)
		}
	})

	t.Run("RuntimeErrorKeepsEarlierWrites", func(t *testing.T) {
		// Redis does not roll back a script's writes when it fails; the
		// token, written last, is not recorded.
		if err := c.Set(ctx, k2, "not a number", 0).Err(); err != nil {
			t.Fatal(err)
		}
		s := fenceredis.NewScript(`
redis.call('SET', KEYS[1], 'written before the error')
return redis.call('INCR', KEYS[2])`)
		_, err := g.Eval(ctx, scope, 60, s, []string{k1, k2})
		if err == nil || errors.Is(err, fence.ErrStaleToken) {
			t.Fatalf("err = %v, want INCR's error", err)
		}
		if h, _ := g.Highest(ctx, scope); h != 6 {
			t.Fatalf("Highest = %d, want 6", h)
		}
		if v, _ := c.Get(ctx, k1).Result(); v != "written before the error" {
			t.Fatalf("k1 = %q: expected Redis to keep the write made before the error", v)
		}
	})

	t.Run("WrongTypeLeavesNothing", func(t *testing.T) {
		// k2 is a string, so HSET fails before any write.
		_, err := g.HSet(ctx, scope, 70, k2, "f", "v")
		if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
			t.Fatalf("err = %v, want WRONGTYPE", err)
		}
		if h, _ := g.Highest(ctx, scope); h != 6 {
			t.Fatalf("Highest = %d, want 6", h)
		}
	})

	t.Run("SyntaxError", func(t *testing.T) {
		_, err := g.Eval(ctx, scope, 80, fenceredis.NewScript(`return (`), nil)
		if err == nil || errors.Is(err, fence.ErrStaleToken) {
			t.Fatalf("err = %v, want a compile error", err)
		}
	})

	t.Run("BodyCannotSeeWrapperLocals", func(t *testing.T) {
		// Reading an undefined global is an error in Redis scripts; the
		// wrapper's 'token' and 'highest' must be undefined for the body.
		_, err := g.Eval(ctx, scope, 90, fenceredis.NewScript(`return highest`), nil)
		if err == nil {
			t.Fatal("body read the wrapper's local 'highest'")
		}
	})
}

// TestNoScriptFallback flushes Redis's script cache and checks that the next
// mutation goes EVALSHA -> NOSCRIPT -> EVAL and succeeds.
func TestNoScriptFallback(t *testing.T) {
	ctx := context.Background()
	run := newRunID()
	log := &cmdLog{}
	c := newClient(t, run, log)
	g, err := fenceredis.New(c, fenceredis.Config{Prefix: "fencetest:" + run + ":"})
	if err != nil {
		t.Fatal(err)
	}
	scope := run + "/noscript"
	key := fenceredis.Key(scope, "v")
	s := fenceredis.NewScript(`return redis.call('SET', KEYS[1], ARGV[1])`)

	apply := []struct {
		name string
		do   func(token uint64) error
	}{
		{"Set", func(tok uint64) error { return g.Set(ctx, scope, tok, key, tok, 0) }},
		{"Eval", func(tok uint64) error { _, err := g.Eval(ctx, scope, tok, s, []string{key}, tok); return err }},
	}
	token := uint64(1)
	for _, a := range apply {
		t.Run(a.name, func(t *testing.T) {
			if err := a.do(token); err != nil { // loads the script
				t.Fatal(err)
			}
			if err := c.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			log.reset()
			token++
			if err := a.do(token); err != nil {
				t.Fatalf("after SCRIPT FLUSH: %v", err)
			}
			cmds, _ := log.reset()
			if want := []string{"evalsha -> NOSCRIPT", "eval"}; !slices.Equal(cmds, want) {
				t.Fatalf("commands %v, want %v", cmds, want)
			}
			token++
			if err := a.do(token); err != nil {
				t.Fatal(err)
			}
			if cmds, _ := log.reset(); !slices.Equal(cmds, []string{"evalsha"}) {
				t.Fatalf("commands %v, want [evalsha]: EVAL should have cached the script", cmds)
			}
			if v, err := c.Get(ctx, key).Result(); err != nil || v != strconv.FormatUint(token, 10) {
				t.Fatalf("data = %q, %v; want %d", v, err, token)
			}
		})
	}
}

func TestTokenTTL(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		cfg  fenceredis.Config
		// check gets the token key's PTTL.
		check func(time.Duration) bool
	}{
		{"default never expires", fenceredis.Config{}, func(d time.Duration) bool { return d == -1 }},
		{"TokenTTL", fenceredis.Config{TokenTTL: time.Hour},
			func(d time.Duration) bool { return d > 59*time.Minute && d <= time.Hour }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, g, run := setupWith(t, tc.cfg)
			scope := run + "/ttl"
			key := fenceredis.Key(scope, "v")
			for _, tok := range []uint64{3, 3} { // an equal token refreshes the expiry too
				if err := g.Set(ctx, scope, tok, key, "v", 0); err != nil {
					t.Fatal(err)
				}
				d, err := c.PTTL(ctx, g.TokenKey(scope)).Result()
				if err != nil || !tc.check(d) {
					t.Fatalf("PTTL(token key) = %v, %v", d, err)
				}
			}
		})
	}
}

func TestNewValidates(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer c.Close()
	for _, tc := range []struct {
		name   string
		client redis.UniversalClient
		cfg    fenceredis.Config
	}{
		{"nil client", nil, fenceredis.Config{}},
		{"open brace in prefix", c, fenceredis.Config{Prefix: "x{"}},
		{"close brace in prefix", c, fenceredis.Config{Prefix: "x}"}},
		{"negative TTL", c, fenceredis.Config{TokenTTL: -time.Second}},
		{"sub-millisecond TTL", c, fenceredis.Config{TokenTTL: time.Microsecond}},
		{"negative replay window", c, fenceredis.Config{ReplayWindow: -time.Second}},
		{"tiny replay window", c, fenceredis.Config{ReplayWindow: time.Millisecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := fenceredis.New(tc.client, tc.cfg); err == nil {
				t.Fatal("New accepted an invalid configuration")
			}
		})
	}
	g, err := fenceredis.New(c, fenceredis.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if got := g.TokenKey("orders/7"); got != "fence:{orders/7}:highest" {
		t.Fatalf("default TokenKey = %q", got)
	}
}
