// Package loadgen drives closed-loop load and summarises it: each client
// runs one operation after another for a fixed time, records what it saw in
// its own Recorder, and the recorders are merged into one Result. It is what
// `fencectl bench` and the bench module's comparison with etcd both measure
// with, so their figures mean the same thing.
package loadgen

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/fencedio/fenced/internal/hist"
)

// Result is one run of one workload. The latencies are in milliseconds, of
// whatever the workload says one operation's latency is; quantiles are
// within about 1.6% (see internal/hist).
type Result struct {
	Workload  string  `json:"workload,omitempty"`
	Clients   int     `json:"clients,omitempty"`
	Round     int     `json:"round,omitempty"` // of a run repeated in rounds, from 1
	Seconds   float64 `json:"seconds"`
	Ops       uint64  `json:"ops"`
	Errors    uint64  `json:"errors"`
	OpsPerSec float64 `json:"opsPerSec"`
	P50Ms     float64 `json:"p50Ms"`
	P90Ms     float64 `json:"p90Ms"`
	P99Ms     float64 `json:"p99Ms"`
	MaxMs     float64 `json:"maxMs"`
	MeanMs    float64 `json:"meanMs"`
	// FirstError is the first error a client saw, if any.
	FirstError string `json:"firstError,omitempty"`
}

// Recorder collects one client's operations. It is used by one goroutine.
type Recorder struct {
	hist     hist.Histogram
	ops      uint64
	errs     uint64
	firstErr error
}

// Op counts one completed operation (err == nil), with latency lat unless
// lat is negative, or one failed operation (see Fail).
func (r *Recorder) Op(ctx context.Context, lat time.Duration, err error) {
	if err != nil {
		r.Fail(ctx, err)
		return
	}
	r.ops++
	if lat >= 0 {
		r.hist.Record(lat)
	}
}

// Fail counts an error, except the cancellation of an interrupted run: an
// error that is ctx's own once ctx is done says nothing about the system
// measured.
func (r *Recorder) Fail(ctx context.Context, err error) {
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return
	}
	r.errs++
	if r.firstErr == nil {
		r.firstErr = err
	}
}

// Run calls each of loops over and over, each on its own goroutine, until d
// has passed or ctx is done; an operation under way at the deadline is
// finished. It returns the time the run took.
func Run(ctx context.Context, d time.Duration, loops []func(context.Context)) time.Duration {
	var wg sync.WaitGroup
	start := time.Now()
	stop := start.Add(d)
	for _, loop := range loops {
		wg.Go(func() {
			for ctx.Err() == nil && time.Now().Before(stop) {
				loop(ctx)
			}
		})
	}
	wg.Wait()
	return time.Since(start)
}

// Summarize merges the recorders of a run that took elapsed.
func Summarize(recs []Recorder, elapsed time.Duration) Result {
	var (
		all hist.Histogram
		res = Result{Seconds: elapsed.Seconds()}
	)
	for i := range recs {
		r := &recs[i]
		all.Merge(&r.hist)
		res.Ops += r.ops
		res.Errors += r.errs
		if res.FirstError == "" && r.firstErr != nil {
			res.FirstError = r.firstErr.Error()
		}
	}
	if elapsed > 0 {
		res.OpsPerSec = float64(res.Ops) / elapsed.Seconds()
	}
	res.P50Ms, res.P90Ms, res.P99Ms = ms(all.Quantile(0.5)), ms(all.Quantile(0.9)), ms(all.Quantile(0.99))
	res.MaxMs, res.MeanMs = ms(all.Max()), ms(all.Mean())
	return res
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
