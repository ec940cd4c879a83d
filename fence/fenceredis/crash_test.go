package fenceredis_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fenceredis"
	"github.com/fencedio/fenced/internal/testenv"
	"github.com/redis/go-redis/v9"
)

const (
	crashChildEnv  = "FENCEREDIS_CRASH_CHILD"
	crashScopeEnv  = "FENCEREDIS_CRASH_SCOPE"
	crashPrefixEnv = "FENCEREDIS_CRASH_PREFIX"

	crashWriters   = 8
	crashValueSize = 16 << 10 // large values keep the kill likely to land mid-send
	crashAtLeast   = 200      // accepted mutations before the kill
)

// crashScript writes three keys per mutation: a string, a hash and a log
// entry. A half-applied mutation would show as a log entry without data or
// data without a log entry.
var crashScript = fenceredis.NewScript(`
redis.call('SET', KEYS[2], ARGV[2])
redis.call('HSET', KEYS[3], 'id', ARGV[1], 'token', TOKEN, 'len', #ARGV[2])
redis.call('RPUSH', KEYS[1], ARGV[1] .. ' ' .. TOKEN)
return 1
`)

func crashValue(id string) string {
	return strings.Repeat(id+";", crashValueSize/(len(id)+1)+1)[:crashValueSize]
}

func crashKeys(scope, id string) []string {
	return []string{fenceredis.Key(scope, "log"), fenceredis.Key(scope, "d:"+id), fenceredis.Key(scope, "h:"+id)}
}

// TestCrashChildProcess is the client that TestCrashMidOperation kills. It
// runs only when started by that test; it writes until it is killed.
func TestCrashChildProcess(t *testing.T) {
	if os.Getenv(crashChildEnv) != "1" {
		t.Skip("helper process for TestCrashMidOperation")
	}
	scope, prefix := os.Getenv(crashScopeEnv), os.Getenv(crashPrefixEnv)
	c := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t), PoolSize: crashWriters})
	g, err := fenceredis.New(c, fenceredis.Config{Prefix: prefix})
	if err != nil {
		fmt.Println("error", err)
		return
	}
	ctx := context.Background()
	var issued, accepted atomic.Uint64
	issued.Store(1000)
	var out sync.Mutex
	var wg sync.WaitGroup
	for w := range crashWriters {
		wg.Go(func() {
			tok := issued.Add(1)
			for n := 0; ; n++ {
				id := fmt.Sprintf("%d-%d", w, n)
				_, err := g.Eval(ctx, scope, tok, crashScript, crashKeys(scope, id), id, crashValue(id))
				out.Lock()
				switch {
				case err == nil:
					fmt.Println("accepted", accepted.Add(1))
				case errors.Is(err, fence.ErrStaleToken):
					tok = issued.Add(1)
				default:
					fmt.Println("error", err)
					out.Unlock()
					return
				}
				out.Unlock()
			}
		})
	}
	wg.Wait()
}

// TestCrashMidOperation kills (SIGKILL) a client process while its writers
// are sending mutations, then checks that every mutation is either entirely
// in Redis or not at all.
func TestCrashMidOperation(t *testing.T) {
	if os.Getenv(crashChildEnv) == "1" {
		t.Skip("in the helper process")
	}
	c, g, run := setup(t)
	scope := run + "/crash"
	prefix := strings.TrimSuffix(g.TokenKey(scope), "{"+fenceredis.HashTag(scope)+"}:highest")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestCrashChildProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashChildEnv+"=1", crashScopeEnv+"="+scope, crashPrefixEnv+"="+prefix)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	reached := false
	for sc.Scan() {
		line := sc.Text()
		if n, ok := strings.CutPrefix(line, "accepted "); ok {
			if v, _ := strconv.Atoi(n); v >= crashAtLeast {
				reached = true
				break
			}
			continue
		}
		if strings.HasPrefix(line, "error ") {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("child: %s", line)
		}
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatalf("kill: %v", err)
	}
	waitErr := cmd.Wait()
	if !reached {
		t.Fatalf("child stopped before %d accepted mutations: %v", crashAtLeast, waitErr)
	}
	if ee := (*exec.ExitError)(nil); !errors.As(waitErr, &ee) || ee.Exited() {
		t.Fatalf("child exit: %v, want killed by a signal", waitErr)
	}

	// Scripts the child sent in full before dying may still be queued in
	// Redis, so read everything in one script: a consistent snapshot.
	snap, err := c.Eval(ctx, `
local log = redis.call('LRANGE', KEYS[1], 0, -1)
local d, h = redis.call('KEYS', ARGV[1]), redis.call('KEYS', ARGV[2])
local dlen, hv = {}, {}
for i, k in ipairs(d) do dlen[i] = redis.call('STRLEN', k) end
for i, k in ipairs(h) do hv[i] = redis.call('HGETALL', k) end
return {log, d, dlen, h, hv, redis.call('GET', KEYS[2])}
`, []string{fenceredis.Key(scope, "log"), g.TokenKey(scope)},
		"d:*{"+fenceredis.HashTag(scope)+"}", "h:*{"+fenceredis.HashTag(scope)+"}").Slice()
	if err != nil {
		t.Fatal(err)
	}
	idOf := func(key, kind string) string {
		return strings.TrimSuffix(strings.TrimPrefix(key, kind+":"), "{"+fenceredis.HashTag(scope)+"}")
	}

	logged := map[string]uint64{} // id -> token
	var prev uint64
	for _, e := range snap[0].([]any) {
		id, tok, _ := strings.Cut(e.(string), " ")
		n, err := strconv.ParseUint(tok, 10, 64)
		if err != nil || n < prev {
			t.Fatalf("log entry %q after token %d: tokens must be valid and non-decreasing", e, prev)
		}
		prev = n
		logged[id] = n
	}
	if len(logged) < crashAtLeast {
		t.Fatalf("%d logged mutations, the child reported %d accepted", len(logged), crashAtLeast)
	}
	if h, _ := snap[5].(string); h != strconv.FormatUint(prev, 10) {
		t.Fatalf("highest token %q, want the last logged %d", h, prev)
	}

	strs := map[string]bool{}
	for i, k := range snap[1].([]any) {
		id := idOf(k.(string), "d")
		strs[id] = true
		if _, ok := logged[id]; !ok {
			t.Errorf("data key %s has no log entry", k)
		}
		if n := snap[2].([]any)[i].(int64); n != crashValueSize {
			t.Errorf("data key %s holds %d bytes, want %d", k, n, crashValueSize)
		}
	}
	hashes := map[string]bool{}
	for i, k := range snap[3].([]any) {
		id := idOf(k.(string), "h")
		hashes[id] = true
		fields := map[string]string{}
		kv := snap[4].([]any)[i].([]any)
		for j := 0; j+1 < len(kv); j += 2 {
			fields[kv[j].(string)] = kv[j+1].(string)
		}
		tok, ok := logged[id]
		if !ok {
			t.Errorf("hash %s has no log entry", k)
			continue
		}
		want := map[string]string{"id": id, "token": strconv.FormatUint(tok, 10), "len": strconv.Itoa(crashValueSize)}
		if fmt.Sprint(fields) != fmt.Sprint(want) {
			t.Errorf("hash %s = %v, want %v", k, fields, want)
		}
	}
	for id := range logged {
		if !strs[id] || !hashes[id] {
			t.Errorf("log entry %s: string written %t, hash written %t; want both", id, strs[id], hashes[id])
		}
	}
	t.Logf("%d mutations applied whole before and around the kill; none half-applied", len(logged))
}
