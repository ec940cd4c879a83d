package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"text/tabwriter"

	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/server"
	"github.com/spf13/cobra"
)

func statusCmd(g *globals) *cobra.Command {
	var top int
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the node's state and the leases closest to expiry",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			hc, err := g.httpClient()
			if err != nil {
				return err
			}
			ctx, cancel := g.requestContext(cmd.Context())
			defer cancel()
			roles := fetchRoles(ctx, hc, g.nodes())
			// The leader's counts if it was named, else the first node that answered.
			statsFrom := preferredNode(roles, g.nodes())
			st, err := fetchStats(ctx, hc, statsFrom)
			if err != nil {
				return err
			}
			c, err := g.client(client.Config{})
			if err != nil {
				return err
			}
			leases, err := c.List(ctx, "", 0)
			if err != nil {
				return err
			}
			sort.SliceStable(leases, func(i, j int) bool { return leases[i].Remaining < leases[j].Remaining })
			if top >= 0 && len(leases) > top {
				leases = leases[:top]
			}
			out := cmd.OutOrStdout()
			if g.json {
				return printJSON(out, map[string]any{"stats": st, "nodes": roles, "expiringSoonest": toJSONs(leases)})
			}
			printStatus(out, roles, statsFrom, st, leases)
			return nil
		},
	}
	cmd.Flags().IntVar(&top, "top", 10, "show this many leases closest to expiry")
	return cmd
}

// fetchStats reads GET /v1/stats of the node at base URL from.
func fetchStats(ctx context.Context, hc *http.Client, from string) (server.Stats, error) {
	resp, err := getOK(ctx, hc, from+"/v1/stats")
	if err != nil {
		return server.Stats{}, err
	}
	defer resp.Body.Close()
	var st server.Stats
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return server.Stats{}, fmt.Errorf("decode stats: %w", err)
	}
	return st, nil
}

// printStatus prints status's text form.
func printStatus(out io.Writer, roles []nodeRole, statsFrom string, st server.Stats, leases []client.Info) {
	state := "not the leader (a follower forwards to it), or no leader yet"
	if st.Ready {
		state = "serving as leader"
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	for _, r := range roles {
		fmt.Fprintf(tw, "node\t%s\t%s\n", r.Endpoint, describeRole(r))
	}
	fmt.Fprintf(tw, "stats from\t%s\t%s, term %d\n", statsFrom, state, st.Term)
	fmt.Fprintf(tw, "log\tcommitted %d\tapplied %d\n", st.CommitIndex, st.AppliedIndex)
	fmt.Fprintf(tw, "leases\t%d current\t%d waiting to acquire\n", st.Leases, st.Waiters)
	fmt.Fprintf(tw, "since start\tacquired %d, released %d\texpired %d, taken over %d\n", st.Acquired, st.Released, st.Expired, st.Takeovers)
	tw.Flush()
	if len(leases) > 0 {
		fmt.Fprintf(out, "\nexpiring soonest:\n")
		printLeases(out, leases)
	}
}
