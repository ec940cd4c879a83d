package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/fencedio/fenced/internal/torture"
	"github.com/fencedio/fenced/internal/torture/proc"
	"github.com/spf13/cobra"
)

// exitViolations is the exit status of a torture run whose checkers found
// violations (or, for --no-fencing, failed to find the stale overwrites).
const exitViolations = 3

func tortureCmd(g *globals) *cobra.Command {
	var (
		cfg        torture.Config
		out        string
		postgresDB string
	)
	cmd := &cobra.Command{
		Use:   "torture",
		Short: "Run the fault-injection harness and check the history",
		Long: `Run workers as separate processes that acquire leases, write with their
tokens to the reference store (and to PostgreSQL with --postgres, Redis with
--redis, and stamped messages through RabbitMQ to a fenced consumer with
--queue), while the harness kills the fenced node with SIGKILL, freezes lease holders with
SIGSTOP for longer than the TTL and delays writes past the lease's expiry.
At the end it checks the history: no stale overwrite at any resource, every
accepted token granted to its writer, tokens unique and increasing, every
acknowledged write present, and the lease history linearizable (porcupine).

By default the harness starts its own node and store. To test your own
deployment pass --endpoint (and --node-kill-cmd/--node-start-cmd to crash
it) and --store. --no-fencing is the negative control: the checkers must
then find stale overwrites.

Exit status: 0 when the run passed, 3 when a checker found violations (or
the negative control found none), 1 for any other error.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f := cmd.Flag("endpoint"); f != nil && f.Changed {
				cfg.Endpoint = g.endpoint
			}
			cfg.PostgresDSN = postgresDB
			if out == "" {
				dir, err := os.MkdirTemp("", "fenced-torture-")
				if err != nil {
					return err
				}
				out = dir
			}
			cfg.OutputDir = out
			cfg.Log = cmd.ErrOrStderr()
			rep, err := torture.Run(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			if g.json {
				if err := printJSON(cmd.OutOrStdout(), rep.Summary); err != nil {
					return err
				}
			} else {
				rep.WriteText(cmd.OutOrStdout())
			}
			if !rep.Passed() {
				return &exitError{code: exitViolations, err: fmt.Errorf("torture run failed; see %s", out)}
			}
			return nil
		},
	}
	tortureFlags(cmd, &cfg, &out, &postgresDB)
	for _, role := range []string{proc.RoleNode, proc.RoleWorker, proc.RoleStore, proc.RoleRestore, proc.RoleConsumer} {
		cmd.AddCommand(tortureChildCmd(role))
	}
	return cmd
}

// tortureFlags binds the torture command's flags to cfg and the paths.
func tortureFlags(cmd *cobra.Command, cfg *torture.Config, out, postgresDB *string) {
	f := cmd.Flags()
	f.DurationVar(&cfg.Duration, "duration", 60*time.Second, "how long the workers run (checking comes after)")
	f.IntVar(&cfg.Workers, "workers", 4, "worker processes")
	f.IntVar(&cfg.Keys, "keys", 3, "lease keys the workers contend for")
	f.DurationVar(&cfg.TTL, "ttl", time.Second, "lease TTL")
	f.Float64Var(&cfg.PauseProbability, "pause-probability", 0.3, "chance that a lease holder is frozen (SIGSTOP) for 1.5-3 TTL; negative disables")
	f.Float64Var(&cfg.DelayShare, "delay-share", 0.1, "share of store writes held by the proxy for 1.5-3 TTL; negative disables")
	f.Float64Var(&cfg.SequenceShare, "sequence-share", 0.3, "share of direct store, SQL and Redis writes sent with the lease's next sequence (resent while their outcome is unknown); negative disables")
	f.Float64Var(&cfg.LostAnswerShare, "lost-answer-share", 0.1, "share of the answers to sequenced writes that workers throw away unread, then resend the write; negative disables")
	f.DurationVar(&cfg.CrashInterval, "crash-interval", 8*time.Second, "mean time between kill -9 of the node")
	f.IntVar(&cfg.Nodes, "nodes", 1, "local nodes: 1, or a cluster of 3 or 5 on 127.0.0.11... with fault-injecting proxies on the raft links (kills, SIGSTOP of the leader, partitions, slow links, rolling restarts, member remove and re-add)")
	f.StringSliceVar(&cfg.ClusterFaults, "cluster-faults", nil, "only these cluster fault kinds: "+strings.Join(torture.ClusterFaultKinds, ", ")+" (default: all but disk-loss, wal-loss, rollback and cluster-restore, asked for by name, and leader-disk-stall, which needs nodes with the failpoints and is in the default of runs with --failpoints or --lose-unsynced)")
	f.DurationVar(&cfg.ClusterFaultInterval, "cluster-fault-interval", 3*time.Second, "mean gap between two cluster faults (--nodes 3|5)")
	f.DurationVar(&cfg.NodeHeartbeatTimeout, "node-heartbeat-timeout", 0, "the local nodes' raft heartbeat and election timeout (0: TTL/4 in a cluster, where it may be at most that; the server's default for one node)")
	f.Float64Var(&cfg.FollowerReadShare, "follower-read-share", 0.5, "share of a cluster's reads sent to a node picked at random instead of the client's choice; negative disables")
	f.Float64Var(&cfg.AfterAckShare, "after-ack-share", 0.5, "share of node crashes sent right after an acknowledged grant, release or renewal; negative: none")
	f.Float64Var(&cfg.SnapshotBeforeCrash, "snapshot-before-crash", 0.3, "chance that the node is made to take a snapshot just before a crash; negative disables")
	f.Uint64Var(&cfg.NodeSnapshotThreshold, "node-snapshot-threshold", 8, "the local node's --snapshot-threshold (low, so that runs snapshot, restore and truncate the log)")
	f.DurationVar(&cfg.NodeSnapshotInterval, "node-snapshot-interval", 200*time.Millisecond, "the local node's --snapshot-interval")
	f.Var(newWordsValue(&cfg.WorkerCommand), "worker-cmd", "command that runs a worker in another language, given --spec JSON (docs/torture.md), e.g. 'python3 sdk/python/torture/worker.py'")
	f.IntVar(&cfg.WorkerCommandWorkers, "worker-cmd-workers", 0, "how many of the workers run --worker-cmd, the others being Go workers (0: all)")
	f.StringSliceVar(&cfg.Failpoints, "failpoints", nil, "mutants to switch on in the local node (needs a binary built with -tags fenced_failpoints); the run must then fail")
	f.BoolVar(&cfg.NoCrashes, "no-crashes", false, "do not crash the node")
	f.BoolVar(&cfg.LoseUnsynced, "lose-unsynced", false, "make every kill of a node or the store a simulated power loss that loses what was not yet fsynced (needs a binary built with -tags fenced_failpoints)")
	f.DurationVar(&cfg.StoreCrashInterval, "store-crash-interval", 0, "also kill -9 the harness's store at this mean interval (0: never)")
	f.BoolVar(&cfg.NoFencing, "no-fencing", false, "negative control: resources accept stale tokens; the checkers must catch it")
	f.StringVar(&cfg.NodeKillCommand, "node-kill-cmd", "", "shell command that crashes the node at --endpoint")
	f.StringVar(&cfg.NodeStartCommand, "node-start-cmd", "", "shell command that starts the node at --endpoint again")
	f.StringVar(&cfg.StoreURL, "store", "", "base URL of your reference store (fenced store) instead of one started here")
	f.StringVar(postgresDB, "postgres", os.Getenv("FENCED_TORTURE_POSTGRES"), "PostgreSQL connection string for fenced SQL writes (env FENCED_TORTURE_POSTGRES); empty: none")
	f.StringVar(&cfg.RedisAddr, "redis", os.Getenv("FENCED_TORTURE_REDIS"), "Redis host:port for writes through the Redis guard (env FENCED_TORTURE_REDIS); empty: none")
	f.StringVar(&cfg.QueueURL, "queue", os.Getenv("FENCED_TORTURE_QUEUE"), "RabbitMQ URL (amqp://...; 'amqp' alone: "+torture.DefaultQueueURL+") for the queue path: workers publish messages stamped with their lease, a consumer process applies them through fencemsg into PostgreSQL (needs --postgres) and is killed now and then (env FENCED_TORTURE_QUEUE); empty: none")
	f.Float64Var(&cfg.QueueDelayShare, "queue-delay-share", 0.2, "share of leases whose messages go through the run's delay queue, which holds them for 3 TTL; negative disables")
	f.DurationVar(&cfg.ConsumerKillInterval, "consumer-kill-interval", 4*time.Second, "mean time between kill -9 of the queue consumer (half of them between a commit and its ack); negative: none")
	f.BoolVar(&cfg.KeepTables, "keep-tables", false, "keep the run's PostgreSQL tables, Redis keys and queues")
	f.StringVar(out, "out", "", "directory for histories, logs and summary.json (default: a new temporary directory)")
	f.Uint64Var(&cfg.Seed, "seed", 0, "seed of the random choices (default: from the clock)")
	f.DurationVar(&cfg.CheckTimeout, "check-timeout", time.Minute, "time limit of the linearizability check")
}

// tortureChildCmd is a process role the harness starts itself as.
func tortureChildCmd(role string) *cobra.Command {
	var spec string
	cmd := &cobra.Command{
		Use:    role + " --spec JSON",
		Short:  "Internal: the torture harness's " + role + " process",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if spec == "" {
				return errors.New("--spec is required")
			}
			return proc.RunChild(cmd.Context(), role, []byte(spec), os.Stdout, os.Stderr)
		},
	}
	cmd.Flags().StringVar(&spec, "spec", "", "JSON specification from the harness")
	return cmd
}

// wordsValue is a flag whose value is split into words at spaces, as a
// command line without quoting.
type wordsValue struct{ words *[]string }

func newWordsValue(p *[]string) *wordsValue { return &wordsValue{p} }

func (v *wordsValue) String() string {
	if v.words == nil {
		return ""
	}
	return strings.Join(*v.words, " ")
}

func (v *wordsValue) Set(s string) error {
	*v.words = strings.Fields(s)
	return nil
}

func (v *wordsValue) Type() string { return "command" }
