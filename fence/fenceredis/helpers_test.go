package fenceredis_test

import (
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fenceredis"
	"github.com/fencedio/fenced/internal/testenv"
	"github.com/redis/go-redis/v9"
)

// TestMain keeps examples in line with testenv's skip-or-fail rule: an
// example cannot skip itself, so when the default Redis is unreachable and
// services are not required, examples are added to -test.skip instead of
// failing on output that could not be produced. As in testenv, an address
// given in FENCED_TEST_REDIS is never skipped.
func TestMain(m *testing.M) {
	flag.Parse()
	if !testenv.Required() && os.Getenv("FENCED_TEST_REDIS") == "" && !redisReachable() {
		skip := "^Example"
		if cur := flag.Lookup("test.skip").Value.String(); cur != "" {
			skip = cur + "|" + skip
		}
		if err := flag.Set("test.skip", skip); err != nil {
			fmt.Fprintln(os.Stderr, "fenceredis: cannot skip examples:", err)
			os.Exit(2)
		}
		fmt.Fprintf(os.Stderr, "fenceredis: Redis unreachable at %s; examples skipped\n", redisAddr())
	}
	os.Exit(m.Run())
}

// redisAddr is the address testenv.RedisAddr uses, for code that has no
// testing.TB (examples and TestMain).
func redisAddr() string {
	if a := os.Getenv("FENCED_TEST_REDIS"); a != "" {
		return a
	}
	return "127.0.0.1:6379"
}

func redisReachable() bool {
	c, err := net.DialTimeout("tcp", redisAddr(), 2*time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// newRunID returns a string that makes this run's keys unique. It contains
// only A-Z and 2-7, so it is safe inside SCAN patterns.
func newRunID() string { return "frt" + rand.Text()[:12] }

// newClient connects to the test Redis (or skips/fails through testenv) and
// deletes every key containing runID when the test ends.
func newClient(t testing.TB, runID string, hooks ...redis.Hook) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	for _, h := range hooks {
		c.AddHook(h)
	}
	t.Cleanup(func() {
		deleteMatching(t, c, "*"+runID+"*")
		c.Close()
	})
	return c
}

func deleteMatching(t testing.TB, c *redis.Client, pattern string) {
	t.Helper()
	ctx := context.Background()
	iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Errorf("cleanup: scan %s: %v", pattern, err)
		return
	}
	for len(keys) > 0 {
		n := min(len(keys), 500)
		if err := c.Del(ctx, keys[:n]...).Err(); err != nil {
			t.Errorf("cleanup: del: %v", err)
			return
		}
		keys = keys[n:]
	}
}

// setup returns a client, a guard whose token keys are private to this run,
// and a scope prefix unique to the run.
func setup(t testing.TB) (*redis.Client, *fenceredis.Guard, string) {
	t.Helper()
	return setupWith(t, fenceredis.Config{})
}

// setupWith is setup with a guard configured by cfg, but for its Prefix.
func setupWith(t testing.TB, cfg fenceredis.Config) (*redis.Client, *fenceredis.Guard, string) {
	t.Helper()
	run := newRunID()
	c := newClient(t, run)
	cfg.Prefix = "fencetest:" + run + ":"
	g, err := fenceredis.New(c, cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c, g, run
}

// recorder is an Observer that remembers every decision.
type recorder struct {
	mu sync.Mutex
	ds []fence.Decision
}

func (r *recorder) Observe(_ context.Context, d fence.Decision) {
	r.mu.Lock()
	r.ds = append(r.ds, d)
	r.mu.Unlock()
}

func (r *recorder) take() []fence.Decision {
	r.mu.Lock()
	defer r.mu.Unlock()
	ds := r.ds
	r.ds = nil
	return ds
}

// cmdLog is a go-redis hook that records the name of every command sent and
// every connection dialled.
type cmdLog struct {
	mu    sync.Mutex
	cmds  []string
	dials int
}

func (l *cmdLog) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		l.mu.Lock()
		l.dials++
		l.mu.Unlock()
		return next(ctx, network, addr)
	}
}

func (l *cmdLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		name := cmd.Name()
		if err != nil {
			name += " -> " + strings.SplitN(err.Error(), " ", 2)[0]
		}
		l.mu.Lock()
		l.cmds = append(l.cmds, name)
		l.mu.Unlock()
		return err
	}
}

func (l *cmdLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		l.mu.Lock()
		for _, c := range cmds {
			l.cmds = append(l.cmds, c.Name())
		}
		l.mu.Unlock()
		return next(ctx, cmds)
	}
}

func (l *cmdLog) reset() (cmds []string, dials int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	cmds, dials = l.cmds, l.dials
	l.cmds, l.dials = nil, 0
	return cmds, dials
}
