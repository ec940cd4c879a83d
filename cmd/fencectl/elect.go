package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/client/election"
	"github.com/spf13/cobra"
)

func electCmd(g *globals) *cobra.Command {
	var (
		ttl, killAfter  time.Duration
		listen, execute bool
	)
	cmd := &cobra.Command{
		Use:   "elect NAME [VALUE] [--listen | --exec -- COMMAND [ARG...]]",
		Short: "Campaign to lead an election, or observe its leaders",
		Long: `elect campaigns in election NAME with VALUE (default hostname/pid),
waits in line until elected, prints "TOKEN VALUE" and leads until Ctrl-C
(then resigns, so the next candidate is elected at once) or until the
leadership is lost (exit status 75). It is etcdctl elect for fenced: the
election is the lease key NAME, VALUE is published as the lease's owner, and
TOKEN is the leadership's fencing token.

With --listen, elect does not campaign: it prints "TOKEN VALUE" for the
current leader and each new one, until Ctrl-C.

With --exec, COMMAND runs once elected, with FENCING_TOKEN, FENCING_SCOPE
(NAME) and FENCING_LEASE_ID in its environment, exactly as under
"fencectl acquire --exec": SIGTERM when the leadership is lost, SIGKILL
after --kill-after, and the same exit statuses (COMMAND's own; 75 and 76
when the leadership was lost; 126 and 127 when COMMAND could not be run).

Examples:
  fencectl elect controllers/orders 10.0.0.7:8080
  fencectl elect controllers/orders --listen
  fencectl elect jobs/reindex --exec -- ./reindex.sh`,
		Args: electArgs(&listen, &execute),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client(client.Config{TTL: ttl})
			if err != nil {
				return err
			}
			e := election.New(c)
			ctx, out, name := cmd.Context(), cmd.OutOrStdout(), args[0]
			if listen {
				err := e.Observe(ctx, name, func(l election.Leader) error { return printLeader(out, g, name, l) })
				if errors.Is(err, context.Canceled) {
					return nil
				}
				return err
			}
			value, argv := "", []string(nil)
			if execute {
				argv = args[cmd.ArgsLenAtDash():]
				args = args[:cmd.ArgsLenAtDash()]
			}
			if len(args) == 2 {
				value = args[1]
			}
			l, err := e.Campaign(ctx, name, value)
			if err != nil {
				if errors.Is(err, context.Canceled) {
					return nil
				}
				return err
			}
			if execute {
				return runUnderLease(ctx, l.Lease(), argv, killAfter)
			}
			return lead(ctx, out, g, name, l)
		},
	}
	cmd.Flags().DurationVar(&ttl, "ttl", 10*time.Second, "leadership (lease) TTL")
	cmd.Flags().BoolVar(&listen, "listen", false, "print each new leader instead of campaigning")
	cmd.Flags().BoolVar(&execute, "exec", false, "run a command while leading")
	cmd.Flags().DurationVar(&killAfter, "kill-after", 5*time.Second, "with --exec: SIGKILL this long after SIGTERM")
	return cmd
}

// electArgs checks elect's arguments against its flags, read when the
// command runs.
func electArgs(listen, execute *bool) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		switch {
		case *listen && *execute:
			return errors.New("--listen and --exec exclude each other")
		case *execute:
			if n := cmd.ArgsLenAtDash(); n < 1 || n > 2 || len(args) <= n {
				return errors.New("usage: fencectl elect NAME [VALUE] --exec -- COMMAND [ARG...]")
			}
			return nil
		case *listen:
			return cobra.ExactArgs(1)(cmd, args)
		}
		return cobra.RangeArgs(1, 2)(cmd, args)
	}
}

// lead prints the leadership l of election name, then holds it until ctx
// ends (it resigns) or the leadership is lost (exit status 75).
func lead(ctx context.Context, out io.Writer, g *globals, name string, l *election.Leadership) error {
	if err := printLeader(out, g, name, election.Leader{Value: l.Value(), Token: l.Token()}); err != nil {
		l.Resign(context.Background())
		return err
	}
	if !g.json {
		fmt.Fprintf(os.Stderr, "leading %q as %s (ttl %s); Ctrl-C resigns\n", name, l.Value(), human(l.Lease().TTL()))
	}
	select {
	case <-ctx.Done():
		if err := l.Resign(context.Background()); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "resigned %q\n", name)
		return nil
	case <-l.Done():
		return &exitError{code: exitLost, err: l.Err()}
	}
}

// printLeader prints a leader as "TOKEN VALUE", or as JSON.
func printLeader(w io.Writer, g *globals, name string, l election.Leader) error {
	if g.json {
		return printJSON(w, map[string]any{"name": name, "value": l.Value, "token": l.Token})
	}
	_, err := fmt.Fprintf(w, "%d %s\n", l.Token, l.Value)
	return err
}
