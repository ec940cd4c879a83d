package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/fencedio/fenced/client"
	"github.com/spf13/cobra"
)

// leaseJSON is the machine-readable form of a lease. LeaseID is set only
// for the lease's holder (acquire, renew): get, list and watch never learn
// it from the server.
type leaseJSON struct {
	Key         string `json:"key"`
	LeaseID     string `json:"leaseId,omitempty"`
	Owner       string `json:"owner"`
	Token       uint64 `json:"token"`
	TTLMs       int64  `json:"ttlMs"`
	RemainingMs int64  `json:"remainingMs"`
}

func toJSON(i client.Info) leaseJSON {
	return leaseJSON{Key: i.Key, LeaseID: i.ID, Owner: i.Owner, Token: i.Token, TTLMs: i.TTL.Milliseconds(), RemainingMs: i.Remaining.Milliseconds()}
}

// toJSONs is toJSON of each lease.
func toJSONs(leases []client.Info) []leaseJSON {
	out := make([]leaseJSON, len(leases))
	for i, l := range leases {
		out[i] = toJSON(l)
	}
	return out
}

// printLeases prints a table of leases. It has no lease ID column: the
// server shows IDs only to their holders, who already have them.
func printLeases(w io.Writer, leases []client.Info) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tOWNER\tTOKEN\tTTL\tEXPIRES IN")
	for _, l := range leases {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", l.Key, l.Owner, l.Token, human(l.TTL), human(l.Remaining))
	}
	tw.Flush()
}

func acquireCmd(g *globals) *cobra.Command {
	var (
		ttl, wait, killAfter time.Duration
		owner                string
		execute              bool
		conflictCode         int
	)
	cmd := &cobra.Command{
		Use:   "acquire KEY [--exec -- COMMAND [ARG...]]",
		Short: "Acquire a lease, print its token and hold it until interrupted",
		Long: `Acquire KEY, print the fencing token and keep renewing the lease until
Ctrl-C (then release it) or until the lease is lost (exit status 75).

With --exec, run COMMAND while holding the lease, with FENCING_TOKEN,
FENCING_SCOPE and FENCING_LEASE_ID in its environment. If the lease is lost,
COMMAND gets SIGTERM, then SIGKILL after --kill-after. Exit status:
  COMMAND's own status   COMMAND finished while the lease was held
  75                     the lease was lost; COMMAND stopped after SIGTERM
  76                     the lease was lost; COMMAND had to be killed (SIGKILL)
  126                    COMMAND was found but could not be run (not executable)
  127                    COMMAND was not found
  2                      KEY was held by someone else (after --wait, if given);
                         -E/--conflict-exit-code chooses another status, for
                         instance to tell it from a COMMAND that exits 2
  1                      any other error, including an acquisition of unknown
                         outcome (cut by a failover: the key may be held by this
                         owner, without its lease ID, until the TTL runs out)

Without --exec the statuses are 0 (released after Ctrl-C), 75, 2 (or
--conflict-exit-code) and 1.

Examples:
  # run a job only where nobody else runs it; 0 when another node holds it
  fencectl acquire jobs/nightly --ttl 30s -E 0 --exec -- ./nightly.sh
  # wait up to a minute for the key
  fencectl acquire jobs/nightly --wait 1m --exec -- ./nightly.sh`,
		Args: func(cmd *cobra.Command, args []string) error {
			if execute {
				if cmd.ArgsLenAtDash() != 1 || len(args) < 2 {
					return errors.New("usage: fencectl acquire KEY --exec -- COMMAND [ARG...]")
				}
				return nil
			}
			return cobra.ExactArgs(1)(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if conflictCode < 0 || conflictCode > 255 {
				return fmt.Errorf("--conflict-exit-code %d: must be 0 to 255", conflictCode)
			}
			c, err := g.client(client.Config{TTL: ttl, Owner: owner})
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			l, err := c.Acquire(ctx, args[0], client.WithWait(wait))
			if err != nil {
				if errors.Is(err, client.ErrHeld) {
					return &exitError{code: conflictCode, err: err}
				}
				return err
			}
			if execute {
				return runUnderLease(ctx, l, args[1:], killAfter)
			}
			return hold(ctx, cmd.OutOrStdout(), g, l)
		},
	}
	cmd.Flags().DurationVar(&ttl, "ttl", 10*time.Second, "lease TTL")
	cmd.Flags().DurationVar(&wait, "wait", 0, "wait up to this long for a held key")
	cmd.Flags().StringVar(&owner, "owner", "", "owner name (default hostname/pid)")
	cmd.Flags().BoolVar(&execute, "exec", false, "run a command while holding the lease")
	cmd.Flags().DurationVar(&killAfter, "kill-after", 5*time.Second, "with --exec: SIGKILL this long after SIGTERM")
	cmd.Flags().IntVarP(&conflictCode, "conflict-exit-code", "E", exitHeld, "exit status when KEY is held by someone else (0 to 255)")
	return cmd
}

// hold prints the lease and keeps it until ctx ends or the lease is lost.
func hold(ctx context.Context, out io.Writer, g *globals, l *client.Lease) error {
	info := client.Info{Key: l.Key(), ID: l.ID(), Owner: l.Owner(), Token: l.Token(), TTL: l.TTL()}
	if g.json {
		printJSON(out, toJSON(info))
	} else {
		fmt.Fprintf(out, "%d\n", l.Token())
		fmt.Fprintf(os.Stderr, "holding %q as %s (lease %s, ttl %s); Ctrl-C releases\n", l.Key(), l.Owner(), l.ID(), human(l.TTL()))
	}
	select {
	case <-ctx.Done():
		rctx, cancel := context.WithTimeout(context.Background(), g.timeout)
		defer cancel()
		if err := l.Release(rctx); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "released %q\n", l.Key())
		return nil
	case <-l.Done():
		return &exitError{code: exitLost, err: l.Err()}
	}
}

// oneShot runs fn with a client and a context bounded by --timeout.
func (g *globals) oneShot(cmd *cobra.Command, fn func(ctx context.Context, c *client.Client) error) error {
	c, err := g.client(client.Config{})
	if err != nil {
		return err
	}
	ctx, cancel := g.requestContext(cmd.Context())
	defer cancel()
	return fn(ctx, c)
}

func renewCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "renew KEY LEASE_ID",
		Short: "Renew a lease once",
		Long: `renew extends lease LEASE_ID of KEY by its full TTL, once, and prints the
lease: the token stays the same (a renewal keeps the ownership epoch).

It is for scripts that hold a lease across several calls; "acquire" and the
client library renew on their own. LEASE_ID is the holder's secret: the
leaseId of the API's Acquire answer, or what a running "fencectl acquire"
printed (on standard error; leaseId with --json). get, list and watch never
show it.

Renew at least every TTL/3, and present the token with every write: a
renewal that comes too late finds the lease gone.

Exit status: 0 renewed; 1 otherwise, including "lease not held" when LEASE_ID
is not KEY's current lease (it expired, was released or revoked, or never
was): a lost lease never comes back, acquire KEY again for a new token.

Example:
  id=$(curl -s -H 'Content-Type: application/json' \
    -d '{"key":"jobs/7","owner":"cron","ttlMs":30000}' \
    http://127.0.0.1:7420/fenced.v1.LeaseService/Acquire | jq -r .lease.leaseId)
  fencectl renew jobs/7 "$id"
  fencectl release jobs/7 "$id"`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.oneShot(cmd, func(ctx context.Context, c *client.Client) error {
				info, err := c.Renew(ctx, args[0], args[1])
				if err != nil {
					return err
				}
				if g.json {
					return printJSON(cmd.OutOrStdout(), toJSON(info))
				}
				printLeases(cmd.OutOrStdout(), []client.Info{info})
				return nil
			})
		},
	}
}

func releaseCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "release KEY LEASE_ID",
		Short: "Release a lease",
		Long: `release ends lease LEASE_ID of KEY at once, so the next acquirer need not
wait for the TTL to run out. The next grant of KEY carries a higher token.

LEASE_ID is the holder's secret (see "fencectl renew --help" for where it
comes from). Only the current lease can be
released: a stale LEASE_ID can never end another holder's lease. To end a
lease without its ID, an administrator uses "fencectl revoke KEY".

Exit status: 0 released; 1 otherwise, including "lease not held" when
LEASE_ID is not KEY's current lease (already expired, released or revoked).
A release whose answer was lost (a timeout, a failover) may have happened:
"fencectl get KEY" tells.

Example:
  fencectl release jobs/7 4f1c0e9a0b6d4c1e8f2a7b3c5d6e9f01`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.oneShot(cmd, func(ctx context.Context, c *client.Client) error {
				if err := c.Release(ctx, args[0], args[1]); err != nil {
					return err
				}
				if g.json {
					return printJSON(cmd.OutOrStdout(), map[string]string{"released": args[0]})
				}
				fmt.Fprintf(cmd.OutOrStdout(), "released %q\n", args[0])
				return nil
			})
		},
	}
}

func getCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "get KEY",
		Short: "Show the current lease of a key and its last token",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.oneShot(cmd, func(ctx context.Context, c *client.Client) error {
				got, err := c.Get(ctx, args[0])
				if err != nil {
					return err
				}
				out := cmd.OutOrStdout()
				if g.json {
					v := struct {
						Lease     *leaseJSON `json:"lease,omitempty"`
						LastToken uint64     `json:"lastToken"`
					}{LastToken: got.LastToken}
					if got.Lease != nil {
						j := toJSON(*got.Lease)
						v.Lease = &j
					}
					return printJSON(out, v)
				}
				if got.Lease == nil {
					fmt.Fprintf(out, "%q is free (last token %d)\n", args[0], got.LastToken)
					return nil
				}
				printLeases(out, []client.Info{*got.Lease})
				return nil
			})
		},
	}
}

func listCmd(g *globals) *cobra.Command {
	var limit int
	cmd := &cobra.Command{
		Use:   "list [PREFIX]",
		Short: "List current leases",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.oneShot(cmd, func(ctx context.Context, c *client.Client) error {
				leases, err := c.List(ctx, optionalArg(args), limit)
				if err != nil {
					return err
				}
				if g.json {
					return printJSON(cmd.OutOrStdout(), map[string]any{"leases": toJSONs(leases)})
				}
				printLeases(cmd.OutOrStdout(), leases)
				return nil
			})
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 0, "at most this many leases (0: server default)")
	return cmd
}

// optionalArg returns the first argument, or "" when there is none.
func optionalArg(args []string) string {
	if len(args) == 0 {
		return ""
	}
	return args[0]
}

func watchCmd(g *globals) *cobra.Command {
	var after uint64
	cmd := &cobra.Command{
		Use:   "watch [PREFIX]",
		Short: "Print lease transitions as they happen",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client(client.Config{})
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			err = c.Watch(cmd.Context(), optionalArg(args), after, func(ev client.Event) error {
				if g.json {
					return printJSON(out, map[string]any{"type": ev.Type, "revision": ev.Revision, "lease": toJSON(ev.Lease)})
				}
				if ev.Type == client.Resync {
					_, err := fmt.Fprintf(out, "%s  RESYNC    events were missed; re-list (revision %d)\n", time.Now().Format("15:04:05.000"), ev.Revision)
					return err
				}
				_, err := fmt.Fprintf(out, "%s  %-9s %s  token=%d owner=%s rev=%d\n", time.Now().Format("15:04:05.000"),
					ev.Type, ev.Lease.Key, ev.Lease.Token, ev.Lease.Owner, ev.Revision)
				return err
			})
			if errors.Is(err, context.Canceled) {
				return nil
			}
			return err
		},
	}
	cmd.Flags().Uint64Var(&after, "after", 0, "replay events after this revision first")
	return cmd
}
