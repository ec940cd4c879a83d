// Command fenced serves the fenced lease API (the default) or the reference
// fenced store (fenced store).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/fencedio/fenced/server"
	"github.com/spf13/cobra"
)

func main() {
	if os.Getenv("GOGC") == "" {
		go tuneGC(time.Tick(100 * time.Millisecond))
	}
	if err := rootCmd().Execute(); err != nil {
		os.Exit(1)
	}
}

type logFlags struct {
	format, level string
}

func (f *logFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.format, "log-format", "text", "log format: text or json")
	cmd.Flags().StringVar(&f.level, "log-level", "info", "log level: debug, info, warn or error")
}

func (f *logFlags) logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch f.format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format must be text or json, not %q", f.format)
}

func rootCmd() *cobra.Command {
	var (
		cfg  server.Config
		logs logFlags
	)
	cmd := &cobra.Command{
		Use:   "fenced",
		Short: "Lease service whose every grant carries a fencing token",
		Long: `fenced grants exclusive, time-bounded leases on keys. Every grant carries a
fencing token that increases per key; resources reject writes that present a
token lower than one they have already seen.

With no arguments fenced runs a single node with its data in ./fenced-data,
serving the lease API, /metrics and /healthz on 127.0.0.1:7420.`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := logs.logger(os.Stderr)
			if err != nil {
				return err
			}
			cfg.Logger = log
			cfg.RaftLog = os.Stderr
			return serve(cmd.Context(), cfg, log)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.DataDir, "data-dir", "fenced-data", "directory for the raft log and snapshots")
	f.StringVar(&cfg.Listen, "listen", "127.0.0.1:7420", "address of the lease API, /metrics and /healthz")
	f.StringVar(&cfg.RaftListen, "raft-listen", "127.0.0.1:7421", "address for raft peers")
	f.StringVar(&cfg.NodeID, "node-id", "node1", "this node's name in the raft configuration")
	f.DurationVar(&cfg.MinTTL, "min-ttl", time.Second, "shortest lease TTL accepted")
	f.DurationVar(&cfg.MaxTTL, "max-ttl", time.Hour, "longest lease TTL accepted")
	f.DurationVar(&cfg.MaxWait, "max-wait", 10*time.Minute, "longest waitMs accepted")
	f.Int64Var(&cfg.MaxBodyBytes, "max-body-bytes", 64<<10, "largest request body accepted")
	f.IntVar(&cfg.MaxLeases, "max-leases", 2_000_000, "refuse new leases while this many are current")
	f.Uint64Var(&cfg.SnapshotThreshold, "snapshot-threshold", 16384, "log entries between snapshots (also kept after one for lagging peers)")
	f.DurationVar(&cfg.SnapshotInterval, "snapshot-interval", 10*time.Second, "how often the log is compared with --snapshot-threshold")
	f.BoolVar(&cfg.Profiling, "pprof", false, "serve Go profiles under /debug/pprof/ on the API port")
	logs.register(cmd)
	cmd.AddCommand(storeCmd())
	return cmd
}

func serve(ctx context.Context, cfg server.Config, log *slog.Logger) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv, err := server.New(cfg)
	if err != nil {
		log.Error("cannot start", "err", err)
		return err
	}
	log.Info("fenced starting", "listen", cfg.Listen, "raft_listen", cfg.RaftListen, "data_dir", cfg.DataDir)
	err = srv.Serve(ctx)
	if cerr := srv.Close(); err == nil {
		err = cerr
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		log.Error("stopped", "err", err)
		return err
	}
	log.Info("fenced stopped")
	return nil
}
