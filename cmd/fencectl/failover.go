package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/fencedio/fenced/client"
	"github.com/spf13/cobra"
)

type failoverConfig struct {
	fenced  string
	nodes   int
	trials  int
	holders int
	settle  time.Duration
	timeout time.Duration
	dir     string
}

// FailoverResult is what failover-bench prints with --json. Times are from
// the SIGKILL of the leader to the first acquisition granted through any
// live endpoint.
type FailoverResult struct {
	Nodes          int       `json:"nodes"`
	Trials         int       `json:"trials"`
	FirstAcquireMs []float64 `json:"firstAcquireMs"`
	P50Ms          float64   `json:"p50Ms"`
	MaxMs          float64   `json:"maxMs"`
	// Holders keep leases of the client's default TTL, renewing on their
	// own, through every trial; HoldersLost of them lost theirs.
	Holders     int      `json:"holders"`
	HolderTTLMs int64    `json:"holderTtlMs"`
	HoldersLost int      `json:"holdersLost"`
	Lost        []string `json:"lost,omitempty"`
}

func failoverBenchCmd(g *globals) *cobra.Command {
	var cfg failoverConfig
	cmd := &cobra.Command{
		Use:   "failover-bench",
		Short: "Measure leader failover on a local cluster of fenced processes",
		Long: `Start a cluster of fenced processes on loopback ports, keep a few leases
with the client's default TTL (renewing on their own), then, trial after
trial, kill the leader with SIGKILL and measure the time until an
acquisition is granted through any live endpoint; restart the killed node
and wait until it has caught up before the next trial. Prints p50 and max
of that time and how many of the held leases were lost (there must be
none).

Exit status: 0, or 3 when a held lease was lost, 1 for any other error.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			res, err := runFailoverBench(cmd.Context(), cmd.ErrOrStderr(), cfg)
			if err != nil {
				return err
			}
			if g.json {
				err = printJSON(cmd.OutOrStdout(), res)
			} else {
				printFailover(cmd.OutOrStdout(), res)
			}
			if err == nil && res.HoldersLost > 0 {
				err = &exitError{code: exitViolations, err: fmt.Errorf("%d healthy holders lost their leases", res.HoldersLost)}
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.fenced, "fenced", "", "the fenced binary (default: fenced beside fencectl, else on PATH)")
	f.IntVar(&cfg.nodes, "nodes", 3, "cluster size")
	f.IntVar(&cfg.trials, "trials", 30, "leader kills")
	f.IntVar(&cfg.holders, "holders", 3, "leases held through every trial")
	f.DurationVar(&cfg.settle, "settle", 4*time.Second, "pause after the cluster caught up, before the next kill (holders renew every TTL/3)")
	f.DurationVar(&cfg.timeout, "timeout", 30*time.Second, "give up on a trial after this long without an acquisition")
	f.StringVar(&cfg.dir, "dir", "", "directory for data and logs (default: a new temporary one, removed at the end)")
	return cmd
}

func (cfg *failoverConfig) validate() error {
	switch {
	case cfg.nodes < 3:
		return fmt.Errorf("--nodes %d: a failover needs at least 3 nodes", cfg.nodes)
	case cfg.trials < 1 || cfg.holders < 0 || cfg.settle < 0 || cfg.timeout <= 0:
		return errors.New("--trials must be at least 1, --holders and --settle not negative, --timeout positive")
	}
	if cfg.fenced == "" {
		exe, err := os.Executable()
		if err == nil {
			cfg.fenced = filepath.Join(filepath.Dir(exe), "fenced")
		}
		if _, err := os.Stat(cfg.fenced); err != nil {
			if cfg.fenced, err = exec.LookPath("fenced"); err != nil {
				return fmt.Errorf("no fenced binary beside fencectl or on PATH; pass --fenced: %w", err)
			}
		}
	}
	return nil
}

func runFailoverBench(ctx context.Context, log io.Writer, cfg failoverConfig) (FailoverResult, error) {
	if err := cfg.validate(); err != nil {
		return FailoverResult{}, err
	}
	if cfg.dir == "" {
		dir, err := os.MkdirTemp("", "fenced-failover-")
		if err != nil {
			return FailoverResult{}, err
		}
		defer os.RemoveAll(dir)
		cfg.dir = dir
	}
	c, err := startLocalCluster(cfg.fenced, cfg.dir, cfg.nodes)
	if err != nil {
		return FailoverResult{}, err
	}
	defer c.stop()
	if _, err := c.waitSettled(ctx, 30*time.Second); err != nil {
		return FailoverResult{}, err
	}
	holders, err := holdLeases(ctx, c.urls(false), cfg.holders)
	if err != nil {
		return FailoverResult{}, err
	}
	res := FailoverResult{Nodes: cfg.nodes, Trials: cfg.trials, Holders: cfg.holders}
	for trial := range cfg.trials {
		d, err := failoverTrial(ctx, c, trial, cfg)
		if err != nil {
			return res, fmt.Errorf("trial %d: %w (logs in %s)", trial+1, err, cfg.dir)
		}
		lost := 0
		for _, l := range holders {
			if l.Err() != nil {
				lost++
			}
		}
		fmt.Fprintf(log, "trial %d: first acquisition %v after the kill; %d holders lost so far\n", trial+1, d.Round(time.Millisecond), lost)
		res.FirstAcquireMs = append(res.FirstAcquireMs, float64(d.Microseconds())/1000)
	}
	sorted := slices.Sorted(slices.Values(res.FirstAcquireMs))
	res.P50Ms, res.MaxMs = sorted[(len(sorted)-1)/2], sorted[len(sorted)-1]
	res.Lost = lostHolders(ctx, c.urls(true), holders)
	res.HoldersLost = len(res.Lost)
	if len(holders) > 0 {
		res.HolderTTLMs = holders[0].TTL().Milliseconds()
	}
	for _, l := range holders {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		l.Release(rctx)
		cancel()
	}
	return res, nil
}

// holdLeases acquires n leases, each by its own client with the default
// configuration (TTL, renewal) and every endpoint.
func holdLeases(ctx context.Context, urls []string, n int) ([]*client.Lease, error) {
	var out []*client.Lease
	for i := range n {
		cl, err := client.New(client.Config{Endpoints: urls, Owner: fmt.Sprintf("holder-%d", i)})
		if err != nil {
			return nil, err
		}
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		l, err := cl.Acquire(actx, fmt.Sprintf("failover-bench/held/%d", i))
		cancel()
		if err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, nil
}

// lostHolders describes each held lease that was lost, or that the
// cluster no longer shows with its token and owner.
func lostHolders(ctx context.Context, urls []string, holders []*client.Lease) []string {
	var lost []string
	cl, err := client.New(client.Config{Endpoints: urls})
	if err != nil {
		return []string{err.Error()}
	}
	for _, l := range holders {
		if err := l.Err(); err != nil {
			lost = append(lost, fmt.Sprintf("%s: %v", l.Key(), err))
			continue
		}
		gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		got, err := cl.Get(gctx, l.Key())
		cancel()
		var info *client.Info
		if err == nil {
			info = got.Lease
		}
		if info == nil || info.Token != l.Token() || info.Owner != l.Owner() {
			lost = append(lost, fmt.Sprintf("%s: the cluster shows %+v (%v), want token %d", l.Key(), info, err, l.Token()))
		}
	}
	return lost
}

// failoverTrial kills the leader, measures the time to the first
// acquisition through any live endpoint, restarts the killed node and waits
// until the cluster has caught up and settled.
func failoverTrial(ctx context.Context, c *localCluster, trial int, cfg failoverConfig) (time.Duration, error) {
	leader, err := c.waitSettled(ctx, 30*time.Second)
	if err != nil {
		return 0, err
	}
	killed := time.Now()
	c.kill(leader)
	d, err := firstAcquisition(ctx, c.urls(true), trial, killed, cfg.timeout)
	if err != nil {
		return 0, err
	}
	if err := c.start(leader); err != nil {
		return 0, err
	}
	if _, err := c.waitSettled(ctx, 30*time.Second); err != nil {
		return 0, err
	}
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(cfg.settle):
	}
	return d, nil
}

// firstAcquisition tries to acquire a fresh key through each endpoint on
// its own, every 10ms, and returns the time from since to the first grant.
func firstAcquisition(ctx context.Context, urls []string, trial int, since time.Time, timeout time.Duration) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var (
		once  sync.Once
		first time.Duration
		wg    sync.WaitGroup
	)
	for i, url := range urls {
		cl, err := client.New(client.Config{Endpoint: url, TTL: 5 * time.Second})
		if err != nil {
			return 0, err
		}
		wg.Go(func() {
			key := fmt.Sprintf("failover-bench/probe/%d/%d", trial, i)
			for ctx.Err() == nil {
				actx, acancel := context.WithTimeout(ctx, time.Second)
				l, err := cl.Acquire(actx, key)
				acancel()
				if err == nil {
					once.Do(func() { first = time.Since(since); cancel() })
					rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
					l.Release(rctx)
					rcancel()
					return
				}
				select {
				case <-ctx.Done():
				case <-time.After(10 * time.Millisecond):
				}
			}
		})
	}
	wg.Wait()
	if first == 0 {
		return 0, fmt.Errorf("no acquisition within %v of the kill", timeout)
	}
	return first, nil
}

func printFailover(w io.Writer, r FailoverResult) {
	fmt.Fprintf(w, "%d nodes, %d trials of kill -9 of the leader\n", r.Nodes, r.Trials)
	fmt.Fprintf(w, "first acquisition after the kill: p50 %v, max %v\n",
		time.Duration(r.P50Ms*float64(time.Millisecond)).Round(time.Millisecond),
		time.Duration(r.MaxMs*float64(time.Millisecond)).Round(time.Millisecond))
	fmt.Fprintf(w, "healthy holders (TTL %v, renewing): %d, lost %d\n", time.Duration(r.HolderTTLMs)*time.Millisecond, r.Holders, r.HoldersLost)
	for _, l := range r.Lost {
		fmt.Fprintf(w, "  lost %s\n", l)
	}
}
