// Command fenced serves the fenced lease API (the default) or the reference
// fenced store (fenced store).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/fencedio/fenced/lease"
	"github.com/fencedio/fenced/server"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

func main() {
	if os.Getenv("GOGC") == "" {
		go tuneGC(time.Tick(100 * time.Millisecond))
	}
	if err := rootCmd().Execute(); err != nil {
		if !errors.As(err, new(loggedError)) {
			printError(os.Stderr, err)
		}
		os.Exit(1)
	}
}

// usageError is an error in the command line itself: a flag, its value or an
// argument. The remedy is the command's help.
type usageError struct {
	cmd string // the command path, e.g. "fenced store"
	err error
}

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usage(cmd *cobra.Command, err error) error {
	return &usageError{cmd: cmd.CommandPath(), err: err}
}

// listenError is an address fenced could not listen on; flag names it.
type listenError struct {
	flag, addr string
	err        error
}

func (e *listenError) Error() string { return fmt.Sprintf("%s %s: %v", e.flag, e.addr, e.err) }
func (e *listenError) Unwrap() error { return e.err }

// printError writes why fenced cannot go on, and what to do about it, to
// w: every error that ends fenced goes through here, as nothing else prints
// it (cobra's own printing is silenced so that it is said once).
func printError(w io.Writer, err error) {
	fmt.Fprintln(w, "fenced:", err)
	if h := hint(err); h != "" {
		fmt.Fprintln(w, h)
	}
}

// hint says what to do about err, or "" when there is nothing to add.
func hint(err error) string {
	var (
		ue *usageError
		le *listenError
	)
	switch {
	case errors.As(err, &ue):
		return fmt.Sprintf("Run '%s --help' for the flags and their values.", ue.cmd)
	case errors.As(err, &le):
		return fmt.Sprintf("Give %s a HOST:PORT where HOST is an address of this machine (or empty for all) and nothing else listens on PORT.", le.flag)
	}
	return ""
}

// loggedError is an error fenced has already written to its JSON log.
type loggedError struct{ error }

func (e loggedError) Unwrap() error { return e.error }

// fatal returns err. With --log-format json and a logger set up, it first
// writes err (and its hint) as a record, so that every line fenced prints
// is JSON; main then prints nothing more. Errors before the logger exists
// (a flag cobra cannot parse, a bad --log-format) are printed as text.
func (f *logFlags) fatal(log *slog.Logger, err error) error {
	if err == nil || log == nil || f.format != "json" {
		return err
	}
	attrs := []any{"err", err.Error()}
	if h := hint(err); h != "" {
		attrs = append(attrs, "hint", h)
	}
	log.Error("fenced cannot go on", attrs...)
	return loggedError{err}
}

// noArgs is cobra.NoArgs, reported as a usage error.
func noArgs(cmd *cobra.Command, args []string) error {
	if err := cobra.NoArgs(cmd, args); err != nil {
		return usage(cmd, err)
	}
	return nil
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
		return nil, fmt.Errorf("--log-level must be debug, info, warn or error, not %q", f.level)
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
		cfg            server.Config
		logs           logFlags
		initialCluster string
		configFile     string
	)
	cmd := &cobra.Command{
		Use:   "fenced",
		Short: "Lease service whose every grant carries a fencing token",
		Long: `fenced grants exclusive, time-bounded leases on keys. Every grant carries a
fencing token that increases per key; resources reject writes that present a
token lower than one they have already seen.

With no arguments fenced runs a single node with its data in ./fenced-data,
serving the lease API, /metrics and /healthz on 127.0.0.1:7420.

A cluster: start every member with the same --initial-cluster list of raft
addresses and its own --node-id (and its own --data-dir and --listen). The
cluster forms once every member in the list has started. A node restarted
on its data directory rejoins with the membership stored there and ignores
the list. Every node serves every call.

A member that lost its data directory (disk failure, corrupt log) refuses
to form the cluster again: it forgot its votes and the entries it
acknowledged. Bring it back as a new member:

  fencectl member remove ID
  rm -rf DATA_DIR                      (on the lost member)
  fenced --join --node-id ID --data-dir DATA_DIR --raft-listen RAFTHOST:PORT ...
  fencectl member add ID RAFTHOST:PORT`,
		Args:          noArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) (err error) {
			if configFile != "" {
				if err := applyConfigFile(cmd, configFile); err != nil {
					return usage(cmd, err)
				}
			}
			cfg.LogOutput = server.NewLogWriter(os.Stderr)
			log, err := logs.logger(cfg.LogOutput)
			if err != nil {
				return usage(cmd, err)
			}
			defer func() { err = logs.fatal(log, err) }()
			cfg.Logger = log
			cfg.RaftLogger = log
			if cfg.InitialCluster, err = server.ParseInitialCluster(initialCluster); err != nil {
				return usage(cmd, fmt.Errorf("--initial-cluster: %w", err))
			}
			if len(cfg.InitialCluster) > 0 && !cmd.Flags().Changed("raft-listen") {
				cfg.RaftListen = "" // this node's address in the list
			}
			if err := cfg.Validate(); err != nil {
				return usage(cmd, err)
			}
			return serve(cmd.Context(), cfg, log)
		},
	}
	// Subcommands inherit this: a flag or value cobra cannot parse.
	cmd.SetFlagErrorFunc(usage)
	registerNodeFlags(cmd.Flags(), &cfg, &initialCluster)
	registerSecurityFlags(cmd, &cfg)
	logs.register(cmd)
	registerConfigFlag(cmd, &configFile)
	cmd.AddCommand(storeCmd(), restoreCmd(), versionCmd())
	return cmd
}

// registerNodeFlags adds the flags of the node's Config (but security's) and
// --initial-cluster. A flag's default is the server's (server.Default*), or
// zero where the server works its default out.
func registerNodeFlags(f *pflag.FlagSet, cfg *server.Config, initialCluster *string) {
	f.StringVar(&cfg.DataDir, "data-dir", server.DefaultDataDir, "directory for the raft log and snapshots")
	f.StringVar(&cfg.Listen, "listen", server.DefaultListen, "address of the lease API, /metrics and /healthz")
	f.StringVar(&cfg.RaftListen, "raft-listen", server.DefaultRaftListen, "address for raft peers and calls forwarded by them (default in a cluster: this node's address in --initial-cluster)")
	f.StringVar(&cfg.RaftAdvertise, "raft-advertise", "",
		"address peers dial to reach this node, when not --raft-listen (a proxy, NAT); --initial-cluster lists this one (default --raft-listen)")
	f.StringVar(&cfg.AdvertiseClientURL, "advertise-client-url", "",
		"base URL clients reach this node's API at; recorded in the cluster for member list and client endpoint sync (default: http(s)://--listen, none when --listen is every address)")
	f.StringVar(&cfg.NodeID, "node-id", server.DefaultNodeID, "this node's name in the raft configuration")
	f.StringVar(initialCluster, "initial-cluster", "",
		"members of a new cluster, ID=RAFTHOST:PORT,... (the same on every node; ignored once the data directory holds raft state)")
	f.StringVar(&cfg.InitialClusterState, "initial-cluster-state", server.ClusterNew,
		"with an empty data directory: new forms the cluster with --initial-cluster; existing waits to be added (fencectl member add), not voting until then")
	f.BoolVar(&cfg.Join, "join", false,
		"with an empty data directory, wait to be added to a running cluster (fencectl member add) instead of starting a new one")
	f.DurationVar(&cfg.HeartbeatTimeout, "heartbeat-timeout", server.DefaultHeartbeatTimeout,
		"raft heartbeat and election timeout; min-ttl must be at least twice it in a cluster")
	f.DurationVar(&cfg.MinTTL, "min-ttl", server.DefaultMinTTL, "shortest lease TTL accepted")
	f.DurationVar(&cfg.MaxTTL, "max-ttl", server.DefaultMaxTTL, "longest lease TTL accepted")
	f.DurationVar(&cfg.MaxWait, "max-wait", server.DefaultMaxWait, "longest waitMs accepted")
	f.Int64Var(&cfg.MaxBodyBytes, "max-body-bytes", server.DefaultMaxBodyBytes, "largest request body accepted")
	f.IntVar(&cfg.MaxLeases, "max-leases", server.DefaultMaxLeases, "refuse new leases while this many are current")
	f.Var((*byteSize)(&cfg.MaxLeaseBytes), "max-lease-bytes",
		"refuse new leases once the current ones would count more bytes: key + owner + "+strconv.Itoa(lease.LeaseOverhead)+
			" each; suffixes KiB, MiB, GiB (0: a quarter of the memory, the lowest of the machine's, the cgroup's limit and GOMEMLIMIT)")
	f.Uint64Var(&cfg.SnapshotThreshold, "snapshot-threshold", server.DefaultSnapshotThreshold, "log entries between snapshots (also kept after one for lagging peers)")
	f.DurationVar(&cfg.SnapshotInterval, "snapshot-interval", server.DefaultSnapshotInterval, "how often the log is compared with --snapshot-threshold")
	registerLimitFlags(f, cfg)
	f.Uint64Var(&cfg.TrailingLogs, "snapshot-trailing-logs", 0,
		"log entries a snapshot leaves for lagging followers; compaction removes older ones (default --snapshot-threshold)")
	f.BoolVar(&cfg.Profiling, "pprof", false, "serve Go profiles under /debug/pprof/ on the API port")
}

func serve(ctx context.Context, cfg server.Config, log *slog.Logger) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv, err := server.New(cfg)
	if err != nil {
		return listenErrorOf(err, "--raft-listen", cfg.RaftListen)
	}
	log.Info("fenced starting", "node_id", cfg.NodeID, "listen", cfg.Listen, "raft_listen", cfg.RaftListen, "data_dir", cfg.DataDir)
	stopReload := reloadOnSIGHUP(srv)
	defer stopReload()
	err = srv.Serve(ctx)
	if cerr := srv.Close(); err == nil {
		err = cerr
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		return listenErrorOf(err, "--listen", cfg.Listen)
	}
	log.Info("fenced stopped")
	return nil
}

// listenErrorOf names flag in err if err is a failure to listen on addr.
func listenErrorOf(err error, flag, addr string) error {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "listen" {
		return &listenError{flag: flag, addr: addr, err: op}
	}
	return err
}
