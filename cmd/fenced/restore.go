package main

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/fencedio/fenced/lease"
	"github.com/fencedio/fenced/server"
	"github.com/spf13/cobra"
)

// restoreCmd is fenced restore: the data directory of one member of a new
// cluster, from a backup (fencectl snapshot save).
func restoreCmd() *cobra.Command {
	var (
		cfg                    server.RestoreConfig
		from, initialCluster   string
		raftListen, advertised string
	)
	cmd := &cobra.Command{
		Use:   "restore --from FILE --data-dir DIR [--node-id ID --initial-cluster ...]",
		Short: "Start a new cluster's data directory from a backup",
		Long: `fenced restore writes the data directory of one member of a new cluster from
a backup taken with 'fencectl snapshot save'. Run it on every member with the
same file, --initial-cluster, --bump and --start-floor and its own --node-id
and --data-dir, then start each member as usual on its directory.

The backup keeps every key's last token; no lease survives (holders acquire
again). The new cluster's log starts --bump entries after the backup's index,
and every token is a log index, so every new token exceeds every token the
old cluster issued, also after the backup, as long as it wrote fewer than
--bump entries after it. The log starts at --start-floor at least, a time in
microseconds (default now, for a cluster of one), so that a later restore of
the same backup issues tokens above those of an earlier one.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if from == "" {
				return usage(cmd, errors.New("--from FILE is required"))
			}
			var err error
			if cfg.InitialCluster, err = server.ParseInitialCluster(initialCluster); err != nil {
				return usage(cmd, fmt.Errorf("--initial-cluster: %w", err))
			}
			cfg.RaftAddress = raftListen
			if advertised != "" {
				cfg.RaftAddress = advertised
			}
			if err := cfg.Validate(); errors.Is(err, server.ErrRestoreStartFloor) {
				return usage(cmd, fmt.Errorf("%w: give every member the same --start-floor, such as --start-floor %d", err, time.Now().UnixMicro()))
			} else if err != nil {
				return usage(cmd, err)
			}
			f, err := os.Open(from)
			if err != nil {
				return err
			}
			defer f.Close()
			start, err := server.RestoreBackup(cfg, f)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "restored %s into %s: the new cluster's tokens start above %d\nstart it with: fenced --data-dir %s --node-id %s ...\n",
				from, cfg.DataDir, start, cfg.DataDir, cfg.NodeID)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&from, "from", "", "backup file written by fencectl snapshot save")
	f.StringVar(&cfg.DataDir, "data-dir", server.DefaultDataDir, "data directory to create; it must hold no raft state")
	f.StringVar(&cfg.NodeID, "node-id", server.DefaultNodeID, "this member's ID")
	f.StringVar(&initialCluster, "initial-cluster", "", "the new cluster's members, ID=RAFTHOST:PORT,... (none: a cluster of one)")
	f.StringVar(&raftListen, "raft-listen", server.DefaultRaftListen, "a cluster of one: the raft address it will listen on")
	f.StringVar(&advertised, "raft-advertise", "", "a cluster of one: the raft address peers will dial, if not --raft-listen")
	f.Uint64Var(&cfg.Bump, "bump", lease.DefaultRestoreBump,
		"entries between the backup's index and the new cluster's first; more than the old cluster wrote after the backup")
	f.Uint64Var(&cfg.StartFloor, "start-floor", 0,
		"the new cluster's first index is at least this time in microseconds, the same for every member (as from date +%s%6N); default now, for a cluster of one")
	return cmd
}
