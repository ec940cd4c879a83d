package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"time"

	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/internal/loadgen"
	"github.com/spf13/cobra"
)

type benchConfig struct {
	workload string
	clients  int
	duration time.Duration
	ttl      time.Duration
}

// BenchResult is what bench prints with --json; latencies are of one
// operation.
type BenchResult = loadgen.Result

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

// benchOp readies one client for a workload and returns the body of its
// loop, which records each operation in rec.
type benchOp func(ctx context.Context, c *client.Client, id int, rec *loadgen.Recorder) (func(context.Context), error)

// timed returns a loop body that records how long f takes.
func timed(rec *loadgen.Recorder, f func(context.Context) error) func(context.Context) {
	return func(ctx context.Context) {
		start := time.Now()
		err := f(ctx)
		rec.Op(ctx, time.Since(start), err)
	}
}

// benchOps returns the operation of each workload; run makes the keys of
// this run unique.
func benchOps(run string) map[string]benchOp {
	own := func(id int) string { return fmt.Sprintf("%s/%d", run, id) }
	return map[string]benchOp{
		"acquire-release": func(_ context.Context, c *client.Client, id int, rec *loadgen.Recorder) (func(context.Context), error) {
			return timed(rec, func(ctx context.Context) error {
				l, err := c.Acquire(ctx, own(id))
				if err != nil {
					return err
				}
				return l.Release(ctx)
			}), nil
		},
		"contended": func(_ context.Context, c *client.Client, _ int, rec *loadgen.Recorder) (func(context.Context), error) {
			return timed(rec, func(ctx context.Context) error {
				l, err := c.Acquire(ctx, run+"/contended", client.WithWait(time.Minute))
				if err != nil {
					return err
				}
				return l.Release(context.Background())
			}), nil
		},
		"renew": func(ctx context.Context, c *client.Client, id int, rec *loadgen.Recorder) (func(context.Context), error) {
			l, err := c.Acquire(ctx, own(id))
			if err != nil {
				return nil, err
			}
			go func() { <-ctx.Done(); l.Release(context.Background()) }()
			return timed(rec, func(ctx context.Context) error {
				_, err := c.Renew(ctx, own(id), l.ID())
				return err
			}), nil
		},
		"renew-stream": func(ctx context.Context, c *client.Client, id int, rec *loadgen.Recorder) (func(context.Context), error) {
			l, err := c.Acquire(ctx, own(id))
			if err != nil {
				return nil, err
			}
			ka := c.KeepAlive(ctx)
			go func() { <-ctx.Done(); ka.Close(); l.Release(context.Background()) }()
			return timed(rec, func(context.Context) error {
				_, err := ka.Renew(own(id), l.ID())
				return err
			}), nil
		},
		"get": func(_ context.Context, c *client.Client, id int, rec *loadgen.Recorder) (func(context.Context), error) {
			return timed(rec, func(ctx context.Context) error {
				_, err := c.Get(ctx, own(id))
				return err
			}), nil
		},
	}
}

func runBench(ctx context.Context, g *globals, cfg benchConfig) (BenchResult, error) {
	if cfg.clients < 1 {
		return BenchResult{}, errors.New("--clients must be at least 1")
	}
	if cfg.duration <= 0 {
		return BenchResult{}, errors.New("--duration must be positive")
	}
	op, ok := benchOps(fmt.Sprintf("bench/%08x", rand.Uint32()))[cfg.workload]
	if !ok {
		return BenchResult{}, fmt.Errorf("unknown workload %q; want %s", cfg.workload, benchWorkloads)
	}
	// Cancelled when the run ends, which releases the leases held for it.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	recs := make([]loadgen.Recorder, cfg.clients)
	loops := make([]func(context.Context), cfg.clients)
	for i := range loops {
		c, err := g.client(client.Config{TTL: cfg.ttl, Owner: fmt.Sprintf("bench-%d", i)})
		if err != nil {
			return BenchResult{}, err
		}
		if loops[i], err = op(ctx, c, i, &recs[i]); err != nil {
			return BenchResult{}, fmt.Errorf("prepare client %d: %w", i, err)
		}
	}
	res := loadgen.Summarize(recs, loadgen.Run(ctx, cfg.duration, loops))
	res.Workload, res.Clients = cfg.workload, cfg.clients
	return res, nil
}
