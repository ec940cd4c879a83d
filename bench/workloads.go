package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/fencedio/fenced/internal/loadgen"
)

// workload is one family of rows in the report. Adding a workload is adding
// an entry to workloads (and, when it needs an operation the systems do not
// offer yet, a method to conn).
type workload struct {
	name    string // as selected with -workloads
	title   string // as shown in the table
	clients []int  // one row per client count
	op      string // what one operation is: ops/s counts these
	latency string // what p50 and p99 measure
	// renews marks the renewal workloads, which ZooKeeper does not run:
	// it has no renewal of one lock (see zkConn.hold).
	renews bool
	// prepare readies client id for a run and returns the body of its
	// loop, called until the run's time is up, and a cleanup run after it.
	prepare func(ctx context.Context, env *runEnv, c conn, id int, rec *loadgen.Recorder) (loop func(context.Context), cleanup func(), err error)
}

// memoryWorkload is not in workloads: it runs once, against fenced only.
const memoryWorkload = "memory"

var workloads = []workload{
	{
		name:    "acquire-release",
		title:   "acquire+release",
		clients: []int{1, 16, 64},
		op:      "one acquire+release cycle, each client on its own key",
		latency: "one whole cycle",
		prepare: func(ctx context.Context, env *runEnv, c conn, id int, rec *loadgen.Recorder) (func(context.Context), func(), error) {
			key := fmt.Sprintf("%s/%d", env.prefix, id)
			return func(ctx context.Context) {
				start := time.Now()
				h, err := c.lock(ctx, key, false)
				if err == nil {
					err = h.release(ctx)
				}
				rec.Op(ctx, time.Since(start), err)
			}, nil, nil
		},
	},
	{
		name:    "contended",
		title:   "contended handoff",
		clients: []int{16},
		op:      "one handoff: every client acquires one shared key, waiting in line, and releases it at once",
		latency: "handoff gap: from the moment a holder calls release to the moment the next holder's acquire returns",
		prepare: func(ctx context.Context, env *runEnv, c conn, id int, rec *loadgen.Recorder) (func(context.Context), func(), error) {
			key := env.prefix + "/contended"
			return func(ctx context.Context) {
				h, err := c.lock(ctx, key, true)
				if err != nil {
					rec.Op(ctx, -1, err)
					return
				}
				granted := env.now()
				// The lock is exclusive, so the value here is the release
				// start of the holder before this one; 0 for the first grant.
				if prev := env.lastRelease.Load(); prev > 0 {
					rec.Op(ctx, time.Duration(granted-prev), nil)
				} else {
					rec.Op(ctx, -1, nil)
				}
				env.lastRelease.Store(env.now())
				if err := h.release(ctx); err != nil {
					rec.Fail(ctx, err)
				}
			}, nil, nil
		},
	},
	{
		name:    "renew",
		title:   "renew (unary)",
		clients: []int{16},
		op:      "one renewal of a held lease (fenced: Client.Renew; etcd: KeepAliveOnce)",
		latency: "one renewal",
		renews:  true,
		prepare: renewLoop(conn.hold),
	},
	{
		name:    "renew-stream",
		title:   "renew (stream)",
		clients: []int{16},
		op:      "one renewal over a long-lived stream, answer awaited (fenced: KeepAliveStream.Renew; etcd: one LeaseKeepAlive request and response)",
		latency: "one renewal",
		renews:  true,
		prepare: renewLoop(conn.holdStream),
	},
}

// renewLoop prepares a client that takes one lease with hold and renews it
// in a loop.
func renewLoop(hold func(conn, context.Context, string) (renewable, error)) func(context.Context, *runEnv, conn, int, *loadgen.Recorder) (func(context.Context), func(), error) {
	return func(ctx context.Context, env *runEnv, c conn, id int, rec *loadgen.Recorder) (func(context.Context), func(), error) {
		h, err := hold(c, ctx, fmt.Sprintf("%s/%d", env.prefix, id))
		if err != nil {
			return nil, nil, err
		}
		loop := func(ctx context.Context) {
			start := time.Now()
			err := h.renew(ctx)
			rec.Op(ctx, time.Since(start), err)
		}
		cleanup := func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			h.release(ctx)
		}
		return loop, cleanup, nil
	}
}

// offeredBy reports whether spec's system can run w.
func (w workload) offeredBy(spec sysSpec) bool { return !(w.renews && spec.zk) }

// WorkloadNames lists the workloads that Config.Workloads can select.
func WorkloadNames() []string {
	var names []string
	for _, w := range workloads {
		names = append(names, w.name)
	}
	return append(names, memoryWorkload)
}

// runEnv is shared by the clients of one run.
type runEnv struct {
	prefix string    // key prefix, unique to the run
	epoch  time.Time // the run's start, carrying the monotonic clock
	// lastRelease is when the last holder of the contended key started
	// releasing it, in nanoseconds since epoch.
	lastRelease atomic.Int64
}

// now returns the monotonic time since the run's epoch, at least 1.
func (e *runEnv) now() int64 { return max(int64(time.Since(e.epoch)), 1) }

// runOnce runs w with n clients against sys for d, and measures the CPU
// time that the servers (serverCPU) and this process used during the run.
func runOnce(ctx context.Context, sys system, serverCPU func() (time.Duration, error), w workload, n int, d time.Duration) (RunResult, error) {
	// A run that hangs (a server that stopped answering) must still end.
	ctx, cancel := context.WithTimeout(ctx, d+2*time.Minute)
	defer cancel()
	env := &runEnv{prefix: fmt.Sprintf("fencedbench/%s/%d/%08x", w.name, n, rand.Uint32())}
	conns := make([]conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.close()
		}
	}()
	for range n {
		c, err := sys.dial(ctx)
		if err != nil {
			return RunResult{}, fmt.Errorf("%s: dial: %w", sys.name(), err)
		}
		conns = append(conns, c)
	}
	recs := make([]loadgen.Recorder, n)
	loops := make([]func(context.Context), n)
	var cleanups []func()
	defer func() {
		for _, f := range cleanups {
			f()
		}
	}()
	for i, c := range conns {
		loop, cleanup, err := w.prepare(ctx, env, c, i, &recs[i])
		if err != nil {
			return RunResult{}, fmt.Errorf("%s: prepare client %d: %w", sys.name(), i, err)
		}
		loops[i] = loop
		if cleanup != nil {
			cleanups = append(cleanups, cleanup)
		}
	}

	// Every client stops starting operations at the deadline and finishes
	// the one under way; in the contended workload the waiters still in
	// line get their turn, which takes a few handoffs.
	server0, err := serverCPU()
	if err != nil {
		return RunResult{}, err
	}
	self0 := selfCPU()
	env.epoch = time.Now()
	elapsed := loadgen.Run(ctx, d, loops)
	self1 := selfCPU()
	server1, err := serverCPU()
	if err != nil {
		return RunResult{}, err
	}
	if err := ctx.Err(); err != nil {
		return RunResult{}, fmt.Errorf("%s: run interrupted: %w", sys.name(), context.Cause(ctx))
	}
	res := RunResult{Result: loadgen.Summarize(recs, elapsed),
		ServerCPUSeconds: (server1 - server0).Seconds(), ClientCPUSeconds: (self1 - self0).Seconds()}
	if res.Ops > 0 {
		res.ServerCPUPerOpUs = res.ServerCPUSeconds * 1e6 / float64(res.Ops)
		res.ClientCPUPerOpUs = res.ClientCPUSeconds * 1e6 / float64(res.Ops)
	}
	return res, nil
}
