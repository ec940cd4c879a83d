package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"

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
			from := g.nodes()[0]
			best := -1
			for i, r := range roles {
				if r.Role != nil && (best < 0 || r.Role.Ready && !roles[best].Role.Ready) {
					best = i
				}
			}
			if best >= 0 {
				from = roles[best].Endpoint
			}
			from = strings.TrimRight(from, "/")
			if !strings.Contains(from, "://") {
				from = "http://" + from
			}
			req, err := http.NewRequestWithContext(cmd.Context(), http.MethodGet, from+"/v1/backup", nil)
			if err != nil {
				return err
			}
			resp, err := hc.Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s/v1/backup: %s", from, resp.Status)
			}
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
