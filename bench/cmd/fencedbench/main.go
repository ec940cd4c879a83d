// Command fencedbench runs fenced, etcd and ZooKeeper side by side on this machine and
// compares them on the same lease workloads; see bench/README.md.
//
//	cd bench && go run ./cmd/fencedbench            # full run, under 10 minutes
//	cd bench && go run ./cmd/fencedbench -quick     # smoke test, seconds
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/fencedio/fenced/bench"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "fencedbench:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		cfg       bench.Config
		selection string
		clients   string
		jsonOut   string
		systems   string
		wide      bool
	)
	flag.BoolVar(&cfg.Quick, "quick", false, "tiny run for smoke tests: 1 round of 300ms, 5,000 leases (explicit flags still win)")
	flag.DurationVar(&cfg.Duration, "duration", 0, "length of one run of one workload against one system (default 10s)")
	flag.IntVar(&cfg.Rounds, "rounds", 0, "runs of each workload against each system; medians are reported (default 3)")
	flag.IntVar(&cfg.Leases, "leases", 0, "live leases created by the memory workload (default 1000000)")
	flag.StringVar(&selection, "workloads", "", "comma-separated workloads to run (default all): "+strings.Join(bench.WorkloadNames(), ","))
	flag.StringVar(&clients, "clients", "", "comma-separated client counts for acquire-release (default 1,16,64)")
	flag.StringVar(&jsonOut, "json", "", "also write the full report as JSON to this file ('-' for stdout, instead of the table)")
	flag.StringVar(&cfg.FencedBin, "fenced-bin", "", "use this fenced binary instead of building ../cmd/fenced")
	flag.StringVar(&cfg.EtcdBin, "etcd-bin", "", "use this etcdnode binary instead of building ./cmd/etcdnode")
	flag.StringVar(&systems, "systems", "", "comma-separated systems to run, in table order (default fenced,etcd): "+strings.Join(bench.SystemNames(), ","))
	flag.StringVar(&cfg.FencedBoltBin, "fenced-bolt-bin", "", "fenced binary of the fenced-bolt system (a build that kept the raft log in raft-boltdb)")
	flag.StringVar(&cfg.ZooKeeperJar, "zk-jar", "", "ZooKeeper server jar of the zk systems (default "+bench.DefaultZooKeeperJar+")")
	flag.DurationVar(&cfg.Warmup, "warmup", 0, "unmeasured acquire-release run of every system, 16 clients, before the first round (default 3s; quick: none)")
	flag.BoolVar(&wide, "wide", false, "write the table with the systems side by side (ops/s, server CPU/op, ratios to etcd and ZooKeeper) and the machine's description")
	flag.BoolVar(&cfg.KeepTemp, "keep", false, "keep the temporary directory (data, logs, binaries)")
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", flag.Args())
	}
	if selection != "" {
		cfg.Workloads = strings.Split(selection, ",")
	}
	if systems != "" {
		cfg.Systems = strings.Split(systems, ",")
	}
	if clients != "" {
		for _, s := range strings.Split(clients, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil {
				return fmt.Errorf("-clients: %w", err)
			}
			cfg.Clients = append(cfg.Clients, n)
		}
	}

	// SIGINT/SIGTERM end the context; Run's defers then stop both servers.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := bench.Run(ctx, cfg, os.Stderr)
	if err != nil {
		if rep != nil {
			// Keep what was measured before the failure.
			rep.WriteMarkdown(os.Stdout)
		}
		return err
	}
	switch jsonOut {
	case "-":
		return rep.WriteJSON(os.Stdout)
	case "":
	default:
		f, err := os.Create(jsonOut)
		if err != nil {
			return err
		}
		if err := rep.WriteJSON(f); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
	}
	if wide {
		return rep.WriteWide(os.Stdout)
	}
	return rep.WriteMarkdown(os.Stdout)
}
