package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/fence/fencereport"
)

func rejectionsCmd(g *globals) *cobra.Command {
	var (
		limit  int
		follow bool
	)
	cmd := &cobra.Command{
		Use:   "rejections [PREFIX]",
		Short: "List recent stale rejections reported by resources, newest first",
		Long: `List the stale rejections that resources reported to fenced (see
fence/fencereport), newest first: one line per scope, resource and refused
token, with the owners of both epochs as fenced granted them. With
--follow, print each report as the leader records it instead (through any
node; around a leader change some may be missed).`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if follow {
				return followRejections(cmd, g, optionalArg(args))
			}
			return g.oneShot(cmd, func(ctx context.Context, c *client.Client) error {
				list, total, err := c.ListRejections(ctx, optionalArg(args), limit)
				if err != nil {
					return err
				}
				if g.json {
					out := make([]rejectionJSON, len(list))
					for i, r := range list {
						out[i] = toRejectionJSON(r)
					}
					return printJSON(cmd.OutOrStdout(), map[string]any{"total": total, "rejections": out})
				}
				printRejections(cmd.OutOrStdout(), list, total)
				return nil
			})
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 0, "at most this many entries (0: server default)")
	cmd.Flags().BoolVar(&follow, "follow", false, "print rejections as they are recorded, until interrupted")
	return cmd
}

func followRejections(cmd *cobra.Command, g *globals, prefix string) error {
	c, err := g.client(client.Config{})
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	err = c.WatchRejections(cmd.Context(), prefix, func(r client.Rejection) error {
		if g.json {
			return printJSON(out, toRejectionJSON(r))
		}
		_, err := fmt.Fprintf(out, "%s  %s: %s\n", r.Last.Local().Format("15:04:05.000"), r.Scope, describeRejection(r))
		return err
	})
	if cmd.Context().Err() != nil {
		return nil
	}
	return err
}

// rejectionJSON is a rejection as fencectl prints it with --json. Tokens
// are strings, as in the leases, so that no JSON reader rounds them.
type rejectionJSON struct {
	Scope            string `json:"scope"`
	Resource         string `json:"resource"`
	PresentedToken   string `json:"presentedToken"`
	PresentedOwner   string `json:"presentedOwner"`
	PresentedGranted string `json:"presentedGranted,omitempty"`
	HighestToken     string `json:"highestToken"`
	HighestOwner     string `json:"highestOwner"`
	HighestGranted   string `json:"highestGranted,omitempty"`
	ReportedOwner    string `json:"reportedOwner,omitempty"`
	Count            uint64 `json:"count"`
	ScopeCount       uint64 `json:"scopeCount"`
	ResourceCount    uint64 `json:"resourceCount"`
	First            string `json:"first"`
	Last             string `json:"last"`
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func toRejectionJSON(r client.Rejection) rejectionJSON {
	return rejectionJSON{Scope: r.Scope, Resource: r.Resource,
		PresentedToken: strconv.FormatUint(r.Presented, 10), PresentedOwner: r.PresentedOwner,
		PresentedGranted: stamp(r.PresentedGranted),
		HighestToken:     strconv.FormatUint(r.Highest, 10), HighestOwner: r.HighestOwner,
		HighestGranted: stamp(r.HighestGranted), ReportedOwner: r.ReportedOwner,
		Count: r.Count, ScopeCount: r.ScopeCount, ResourceCount: r.ResourceCount,
		First: stamp(r.First), Last: stamp(r.Last)}
}

// describeRejection says it in one sentence: "worker-A's token 63 refused
// 3× by ledger-http after worker-B's 64".
func describeRejection(r client.Rejection) string {
	resource := r.Resource
	if resource == "" {
		resource = "a resource"
	}
	return fmt.Sprintf("%s token %d refused %d× by %s after %s %d",
		possessive(r.PresentedOwner), r.Presented, r.Count, resource, possessive(r.HighestOwner), r.Highest)
}

func possessive(owner string) string {
	if owner == "" {
		return "an unknown owner's"
	}
	return owner + "'s"
}

func printRejections(w io.Writer, list []client.Rejection, total uint64) {
	fmt.Fprintf(w, "%d rejections recorded; the %d most recent:\n", total, len(list))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LAST\tSCOPE\tWHAT")
	for _, r := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", r.Last.Local().Format("15:04:05.000"), r.Scope, describeRejection(r))
	}
	tw.Flush()
}

// demoReporter reports the demo store's rejections to the demo's fenced.
func demoReporter(leaseURL string) (*fencereport.Reporter, error) {
	c, err := client.New(client.Config{Endpoint: leaseURL})
	if err != nil {
		return nil, err
	}
	return fencereport.New(fencereport.Config{Resource: "demo-store", Sender: c, FlushInterval: 100 * time.Millisecond})
}

// showReported flushes the demo's reporter and prints what fenced made of
// the rejections.
func showReported(ctx context.Context, out io.Writer, rep *fencereport.Reporter, leaseURL string) error {
	if err := rep.Close(ctx); err != nil {
		return err
	}
	c, err := client.New(client.Config{Endpoint: leaseURL})
	if err != nil {
		return err
	}
	list, _, err := c.ListRejections(ctx, "", 0)
	if err != nil {
		return err
	}
	if len(list) == 0 {
		return nil
	}
	fmt.Fprintf(out, "\nfenced recorded, from the store's reports (fencectl rejections lists them):\n")
	for _, r := range list {
		fmt.Fprintf(out, "  %s: %s\n", r.Scope, describeRejection(r))
	}
	return nil
}
