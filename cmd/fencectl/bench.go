package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/internal/hist"
	"github.com/spf13/cobra"
)

type benchConfig struct {
	workload string
	clients  int
	duration time.Duration
	ttl      time.Duration
}

// BenchResult is what bench prints with --json.
type BenchResult struct {
	Workload  string  `json:"workload"`
	Clients   int     `json:"clients"`
	Seconds   float64 `json:"seconds"`
	Ops       uint64  `json:"ops"`
	Errors    uint64  `json:"errors"`
	OpsPerSec float64 `json:"opsPerSec"`
	// Latencies of one operation, in milliseconds.
	P50Ms  float64 `json:"p50Ms"`
	P90Ms  float64 `json:"p90Ms"`
	P99Ms  float64 `json:"p99Ms"`
	MaxMs  float64 `json:"maxMs"`
	MeanMs float64 `json:"meanMs"`
	// FirstError is the first error seen, if any.
	FirstError string `json:"firstError,omitempty"`
}

const benchWorkloads = "acquire-release (distinct keys), contended (one key, wait in line), renew, renew-stream, get"

func benchCmd(g *globals) *cobra.Command {
	var cfg benchConfig
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure throughput and latency of a fenced deployment",
		Long: `Run a workload from N concurrent clients for a duration and print
operations per second and latency quantiles (p50, p90, p99, max).

Workloads:
  acquire-release  each client acquires and releases its own keys; one
                   operation is one acquire+release cycle
  contended        every client acquires one shared key, waiting in line,
                   and releases it at once; one operation is one handoff
  renew            each client holds one lease and renews it in a loop
  renew-stream     the same over one KeepAlive stream per client
  get              each client reads a key nobody holds: no raft, no disk,
                   the cost of a call itself`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			res, err := runBench(cmd.Context(), g, cfg)
			if err != nil {
				return err
			}
			if g.json {
				return printJSON(cmd.OutOrStdout(), res)
			}
			printBench(cmd.OutOrStdout(), res)
			return nil
		},
	}
	cmd.Flags().StringVar(&cfg.workload, "workload", "acquire-release", "one of: "+benchWorkloads)
	cmd.Flags().IntVar(&cfg.clients, "clients", 16, "concurrent clients, each with its own connection")
	cmd.Flags().DurationVar(&cfg.duration, "duration", 10*time.Second, "how long to run")
	cmd.Flags().DurationVar(&cfg.ttl, "ttl", 10*time.Second, "TTL of the leases taken")
	return cmd
}

func printBench(w io.Writer, r BenchResult) {
	fmt.Fprintf(w, "workload %s, %d clients, %.1fs\n", r.Workload, r.Clients, r.Seconds)
	fmt.Fprintf(w, "  %d ops, %d errors, %.0f ops/s\n", r.Ops, r.Errors, r.OpsPerSec)
	fmt.Fprintf(w, "  latency p50 %.3fms  p90 %.3fms  p99 %.3fms  max %.3fms  mean %.3fms\n", r.P50Ms, r.P90Ms, r.P99Ms, r.MaxMs, r.MeanMs)
	if r.FirstError != "" {
		fmt.Fprintf(w, "  first error: %s\n", r.FirstError)
	}
}

type worker struct {
	hist     hist.Histogram
	ops      uint64
	errs     uint64
	firstErr error
}

func (w *worker) fail(err error) {
	w.errs++
	if w.firstErr == nil {
		w.firstErr = err
	}
}

func runBench(ctx context.Context, g *globals, cfg benchConfig) (BenchResult, error) {
	if cfg.clients < 1 {
		return BenchResult{}, errors.New("--clients must be at least 1")
	}
	if cfg.duration <= 0 {
		return BenchResult{}, errors.New("--duration must be positive")
	}
	var op func(ctx context.Context, c *client.Client, id int, w *worker) (func(), error)
	run := fmt.Sprintf("bench/%08x", rand.Uint32())
	switch cfg.workload {
	case "acquire-release":
		op = func(ctx context.Context, c *client.Client, id int, w *worker) (func(), error) {
			key := fmt.Sprintf("%s/%d", run, id)
			return func() {
				start := time.Now()
				l, err := c.Acquire(ctx, key)
				if err == nil {
					err = l.Release(ctx)
				}
				w.record(start, err)
			}, nil
		}
	case "contended":
		key := run + "/contended"
		op = func(ctx context.Context, c *client.Client, id int, w *worker) (func(), error) {
			return func() {
				start := time.Now()
				l, err := c.Acquire(ctx, key, client.WithWait(time.Minute))
				if err == nil {
					err = l.Release(context.Background())
				}
				w.record(start, err)
			}, nil
		}
	case "renew":
		op = func(ctx context.Context, c *client.Client, id int, w *worker) (func(), error) {
			key := fmt.Sprintf("%s/%d", run, id)
			l, err := c.Acquire(ctx, key)
			if err != nil {
				return nil, err
			}
			go func() { <-ctx.Done(); l.Release(context.Background()) }()
			return func() {
				start := time.Now()
				_, err := c.Renew(ctx, key, l.ID())
				w.record(start, err)
			}, nil
		}
	case "renew-stream":
		op = func(ctx context.Context, c *client.Client, id int, w *worker) (func(), error) {
			key := fmt.Sprintf("%s/%d", run, id)
			l, err := c.Acquire(ctx, key)
			if err != nil {
				return nil, err
			}
			ka := c.KeepAlive(ctx)
			go func() { <-ctx.Done(); ka.Close(); l.Release(context.Background()) }()
			return func() {
				start := time.Now()
				_, err := ka.Renew(key, l.ID())
				w.record(start, err)
			}, nil
		}
	case "get":
		op = func(ctx context.Context, c *client.Client, id int, w *worker) (func(), error) {
			key := fmt.Sprintf("%s/%d", run, id)
			return func() {
				start := time.Now()
				_, _, _, err := c.Get(ctx, key)
				w.record(start, err)
			}, nil
		}
	default:
		return BenchResult{}, fmt.Errorf("unknown workload %q; want %s", cfg.workload, benchWorkloads)
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	workers := make([]*worker, cfg.clients)
	loops := make([]func(), cfg.clients)
	for i := range workers {
		workers[i] = &worker{}
		c, err := g.client(client.Config{TTL: cfg.ttl, Owner: fmt.Sprintf("bench-%d", i)})
		if err != nil {
			return BenchResult{}, err
		}
		if loops[i], err = op(ctx, c, i, workers[i]); err != nil {
			return BenchResult{}, fmt.Errorf("prepare client %d: %w", i, err)
		}
	}
	var wg sync.WaitGroup
	start := time.Now()
	stop := start.Add(cfg.duration)
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) && ctx.Err() == nil {
				loops[i]()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	cancel()

	var total worker
	for _, w := range workers {
		total.hist.Merge(&w.hist)
		total.ops += w.ops
		total.errs += w.errs
		if total.firstErr == nil {
			total.firstErr = w.firstErr
		}
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	res := BenchResult{
		Workload: cfg.workload, Clients: cfg.clients, Seconds: elapsed.Seconds(),
		Ops: total.ops, Errors: total.errs, OpsPerSec: float64(total.ops) / elapsed.Seconds(),
		P50Ms: ms(total.hist.Quantile(0.5)), P90Ms: ms(total.hist.Quantile(0.9)), P99Ms: ms(total.hist.Quantile(0.99)),
		MaxMs: ms(total.hist.Max()), MeanMs: ms(total.hist.Mean()),
	}
	if total.firstErr != nil {
		res.FirstError = total.firstErr.Error()
	}
	return res, nil
}

func (w *worker) record(start time.Time, err error) {
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			w.fail(err)
		}
		return
	}
	w.hist.Record(time.Since(start))
	w.ops++
}
