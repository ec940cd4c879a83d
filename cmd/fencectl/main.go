// Command fencectl is the command-line client of fenced: acquire and hold
// leases, run a command under a lease, inspect and watch leases, and
// measure a deployment with bench.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/fencedio/fenced/client"
	"github.com/spf13/cobra"
)

// exitError carries a specific exit status out of a command.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := rootCmd().ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "fencectl:", err)
		var ee *exitError
		if errors.As(err, &ee) {
			os.Exit(ee.code)
		}
		os.Exit(1)
	}
}

type globals struct {
	endpoint  string
	endpoints string
	json      bool
	timeout   time.Duration
	creds     credentialFlags
}

func (g *globals) client(cfg client.Config) (*client.Client, error) {
	cfg.Endpoint = g.endpoint
	if err := g.creds.apply(&cfg); err != nil {
		return nil, err
	}
	cfg.Endpoints = client.ParseEndpoints(g.endpoints)
	return client.New(cfg)
}

// requestContext bounds one-shot requests.
func (g *globals) requestContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, g.timeout)
}

func rootCmd() *cobra.Command {
	g := &globals{}
	cmd := &cobra.Command{
		Use:           "fencectl",
		Short:         "Command-line client of the fenced lease service",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	def := os.Getenv("FENCED_ENDPOINT")
	if def == "" {
		def = "http://127.0.0.1:7420"
	}
	cmd.PersistentFlags().StringVar(&g.endpoint, "endpoint", def, "fenced base URL (env FENCED_ENDPOINT)")
	cmd.PersistentFlags().StringVar(&g.endpoints, "endpoints", os.Getenv("FENCED_ENDPOINTS"),
		"comma-separated base URLs of a cluster's nodes; calls fail over between them; replaces --endpoint (env FENCED_ENDPOINTS)")
	cmd.PersistentFlags().BoolVar(&g.json, "json", false, "print JSON instead of text")
	cmd.PersistentFlags().DurationVar(&g.timeout, "timeout", 5*time.Second, "timeout of one-shot requests")
	cmd.AddCommand(acquireCmd(g), renewCmd(g), releaseCmd(g), getCmd(g), listCmd(g), watchCmd(g), benchCmd(g), demoCmd(), statusCmd(g), memberCmd(g), snapshotCmd(g))
	cmd.AddCommand(tortureCmd(g), revokeCmd(g), rejectionsCmd(g), failoverBenchCmd(g), versionCmd(g), electCmd(g))
	g.creds.register(cmd)
	return cmd
}

// nodes returns the base URLs the user named: --endpoints, else --endpoint.
func (g *globals) nodes() []string {
	if eps := client.ParseEndpoints(g.endpoints); len(eps) > 0 {
		return eps
	}
	return []string{g.endpoint}
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// human formats a duration for people: 1.5s, 2m3s, 250ms.
func human(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}
