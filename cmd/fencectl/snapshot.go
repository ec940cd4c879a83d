package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"github.com/fencedio/fenced/lease"
	"github.com/fencedio/fenced/server"
	"github.com/spf13/cobra"
)

func snapshotCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "snapshot",
		Short: "Back up a cluster (restore with fenced restore)",
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "save FILE",
		Short: "Write a backup of the leader's state to FILE",
		Long: `snapshot save writes a backup of the cluster's state to FILE: every key with
its last token, taken from the leader (or, if none answers as leader, the
first node that answers). It holds no lease and no lease ID. Start a new
cluster from it with 'fenced restore --from FILE'.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			hc, err := g.httpClient()
			if err != nil {
				return err
			}
			ctx, cancel := g.requestContext(cmd.Context())
			roles := fetchRoles(ctx, hc, g.nodes())
			cancel()
			from := preferredNode(roles, g.nodes())
			resp, err := getOK(cmd.Context(), hc, from+"/v1/backup")
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			// Written beside FILE and renamed: FILE is whole or absent.
			path := args[0]
			tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*.tmp")
			if err != nil {
				return err
			}
			defer os.Remove(tmp.Name())
			n, err := io.Copy(tmp, resp.Body)
			if err == nil {
				err = tmp.Sync()
			}
			if cerr := tmp.Close(); err == nil {
				err = cerr
			}
			if err == nil {
				err = checkBackup(tmp.Name(), resp.Header.Get(server.BackupIndexHeader))
			}
			if err != nil {
				return fmt.Errorf("backup from %s: %w", from, err)
			}
			if err := os.Rename(tmp.Name(), path); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "saved %s: %d bytes from %s at log index %s\n", path, n, from, resp.Header.Get(server.BackupIndexHeader))
			return nil
		},
	})
	return cmd
}

// checkBackup reads the backup at path back, so that a transfer cut short
// is an error here rather than at a restore: it must parse whole and be
// taken at the index the node announced.
func checkBackup(path, index string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := lease.Restore(f, 0)
	if err != nil {
		return err
	}
	if got := strconv.FormatUint(st.Applied(), 10); got != index {
		return fmt.Errorf("backup taken at index %s, announced as %q", got, index)
	}
	return nil
}
