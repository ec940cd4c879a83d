package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/fence/fencehttp"
	"github.com/fencedio/fenced/server"
	"github.com/fencedio/fenced/store"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

func demoCmd() *cobra.Command {
	var (
		noFencing bool
		ttl       time.Duration
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Replay the two timelines fencing protects against, with an in-process server and store",
		Long: `Start a lease server and a reference store in this process (loopback,
temporary directories) and replay two stories step by step:

  1. A pauses past its TTL (GC, VM freeze); B acquires and writes; A resumes
     and writes with its old token.
  2. A's write is delayed in the network; A's lease expires; B acquires and
     writes; A's delayed write arrives.

With fencing the store rejects A's stale writes (409). With --no-fencing the
store ignores tokens and A's stale write silently overwrites B's.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDemo(cmd.Context(), cmd.OutOrStdout(), noFencing, ttl)
		},
	}
	cmd.Flags().BoolVar(&noFencing, "no-fencing", false, "run the store without checking tokens, to see what fencing prevents")
	cmd.Flags().DurationVar(&ttl, "ttl", time.Second, "lease TTL used in the stories")
	standalone(cmd)
	return cmd
}

// standalone is for commands that start their own server and so use none of
// fencectl's global flags (endpoints, credentials, output): their help does
// not list them, and setting one is an error rather than silently ignored.
func standalone(cmd *cobra.Command) {
	cmd.PreRunE = func(c *cobra.Command, _ []string) error {
		var set []string
		c.InheritedFlags().VisitAll(func(f *pflag.Flag) {
			if f.Changed {
				set = append(set, "--"+f.Name)
			}
		})
		if len(set) > 0 {
			return fmt.Errorf("%s starts its own server and takes none of fencectl's global flags (%s)", c.Name(), strings.Join(set, ", "))
		}
		return nil
	}
	help := cmd.HelpFunc()
	cmd.SetHelpFunc(func(c *cobra.Command, args []string) {
		c.InheritedFlags().VisitAll(func(f *pflag.Flag) { f.Hidden = true })
		help(c, args)
	})
}

// story prints numbered, timestamped steps.
type story struct {
	out   io.Writer
	start time.Time
}

func (s *story) say(actor, format string, args ...any) {
	fmt.Fprintf(s.out, "%+8.3fs  %-6s %s\n", time.Since(s.start).Seconds(), actor, fmt.Sprintf(format, args...))
}

// gate blocks requests while closed: a paused process, seen from the network.
type gate struct {
	mu   sync.Mutex
	open chan struct{}
	base http.RoundTripper
}

func newGate(base http.RoundTripper) *gate {
	g := &gate{open: make(chan struct{}), base: base}
	close(g.open)
	return g
}

func (g *gate) pause() { g.mu.Lock(); g.open = make(chan struct{}); g.mu.Unlock() }
func (g *gate) resume() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
	default:
		close(g.open)
	}
}

func (g *gate) RoundTrip(req *http.Request) (*http.Response, error) {
	g.mu.Lock()
	open := g.open
	g.mu.Unlock()
	select {
	case <-open:
	case <-req.Context().Done():
		return nil, req.Context().Err()
	}
	return g.base.RoundTrip(req)
}

func (g *gate) Do(req *http.Request) (*http.Response, error) {
	return (&http.Client{Transport: g}).Do(req)
}

type demoEnv struct {
	story    *story
	leaseURL string
	storeURL string
	ttl      time.Duration
}

func runDemo(ctx context.Context, out io.Writer, noFencing bool, ttl time.Duration) error {
	dir, err := os.MkdirTemp("", "fenced-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	srv, err := server.New(server.Config{
		DataDir: dir + "/lease", Listen: "127.0.0.1:0", RaftListen: "127.0.0.1:0",
		MinTTL: 100 * time.Millisecond, HeartbeatTimeout: 100 * time.Millisecond, Logger: quiet,
	})
	if err != nil {
		return err
	}
	defer srv.Close()
	leaseLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go srv.ServeListener(ctx, leaseLn)
	readyCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := srv.WaitReady(readyCtx); err != nil {
		return err
	}

	leaseURL := "http://" + leaseLn.Addr().String()
	reporter, err := demoReporter(leaseURL)
	if err != nil {
		return err
	}
	storeURL, stopStore, err := serveDemoStore(ctx, store.Config{DataDir: dir + "/store", NoFencing: noFencing, Logger: quiet, Observer: reporter})
	if err != nil {
		return err
	}
	defer stopStore()

	env := &demoEnv{
		story:    &story{out: out, start: time.Now()},
		leaseURL: leaseURL,
		storeURL: storeURL,
		ttl:      ttl,
	}
	mode := "fencing ON: the store rejects tokens lower than the highest it has accepted"
	if noFencing {
		mode = "fencing OFF (--no-fencing): the store accepts every write"
	}
	fmt.Fprintf(out, "lease server %s, store %s\n%s\n", env.leaseURL, env.storeURL, mode)

	fmt.Fprintf(out, "\n== Story 1: a process pauses past its TTL\n")
	stale1, err := env.pausedWriter(ctx, "orders/7")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\n== Story 2: a write is delayed in the network\n")
	stale2, err := env.delayedWrite(ctx, "orders/8")
	if err != nil {
		return err
	}
	if err := showReported(ctx, out, reporter, leaseURL); err != nil {
		return err
	}
	fmt.Fprintln(out)
	switch n := stale1 + stale2; {
	case noFencing && n > 0:
		fmt.Fprintf(out, "Without fencing, %d stale write(s) overwrote newer data. The leases were exclusive the whole time;\nthe damage was done by writes that arrived after their lease had moved on.\n", n)
	case n == 0:
		fmt.Fprintln(out, "With fencing, both stale writes were rejected and B's data survived. Run with --no-fencing to see the alternative.")
	default:
		return fmt.Errorf("%d stale write(s) were accepted with fencing on", n)
	}
	return nil
}

// start makes the two actors of a story, A (whose network can be paused)
// and B, and has A acquire key.
func (e *demoEnv) start(ctx context.Context, key string) (aNet *gate, b *client.Client, la *client.Lease, err error) {
	aNet = newGate(http.DefaultTransport)
	a, err := client.New(client.Config{Endpoint: e.leaseURL, Owner: "A", TTL: e.ttl, HTTPClient: aNet})
	if err != nil {
		return nil, nil, nil, err
	}
	if b, err = client.New(client.Config{Endpoint: e.leaseURL, Owner: "B", TTL: e.ttl}); err != nil {
		return nil, nil, nil, err
	}
	la, err = a.Acquire(ctx, key)
	return aNet, b, la, err
}

// pausedWriter replays story 1 and returns how many stale writes the
// store accepted.
func (e *demoEnv) pausedWriter(ctx context.Context, key string) (int, error) {
	s := e.story
	aNet, b, la, err := e.start(ctx, key)
	if err != nil {
		return 0, err
	}
	s.say("A", "acquires %q -> token %d (TTL %v)", key, la.Token(), e.ttl)
	if _, err := e.put(ctx, la, nil, key, "written by A"); err != nil {
		return 0, err
	}

	aNet.pause()
	s.say("A", "pauses (GC, VM freeze): its renewals stop reaching the server")
	lb, err := b.Acquire(ctx, key, client.WithWait(10*e.ttl))
	if err != nil {
		return 0, err
	}
	s.say("server", "A's lease expired; B was waiting in line")
	s.say("B", "acquires %q -> token %d", key, lb.Token())
	if _, err := e.put(ctx, lb, nil, key, "written by B"); err != nil {
		return 0, err
	}

	aNet.resume()
	s.say("A", "resumes; it checked its lease before the pause, so it goes on and writes with token %d", la.Token())
	status, err := e.put(ctx, la, nil, key, "written by A (stale)")
	if err != nil {
		return 0, err
	}
	if status == http.StatusConflict {
		select {
		case <-la.Done():
			s.say("A", "its lease context is now cancelled: %v", context.Cause(la.Context()))
		case <-time.After(time.Second):
		}
	}
	defer lb.Release(context.Background())
	return e.final(ctx, key, lb.Token())
}

// delayedWrite replays story 2.
func (e *demoEnv) delayedWrite(ctx context.Context, key string) (int, error) {
	s := e.story
	aNet, b, la, err := e.start(ctx, key)
	if err != nil {
		return 0, err
	}
	s.say("A", "acquires %q -> token %d", key, la.Token())

	wire := newGate(http.DefaultTransport)
	wire.pause()
	type result struct {
		status int
		err    error
	}
	delivered := make(chan result, 1)
	s.say("A", "sends a write with token %d; the network holds the packet", la.Token())
	go func() {
		status, err := e.put(context.Background(), la, wire, key, "written by A (delayed)")
		delivered <- result{status, err}
	}()
	aNet.pause()
	s.say("A", "crashes; its lease will expire")

	lb, err := b.Acquire(ctx, key, client.WithWait(10*e.ttl))
	if err != nil {
		return 0, err
	}
	s.say("B", "acquires %q after A's lease expired -> token %d", key, lb.Token())
	if _, err := e.put(ctx, lb, nil, key, "written by B"); err != nil {
		return 0, err
	}
	s.say("net", "finally delivers A's delayed write")
	wire.resume()
	if r := <-delivered; r.err != nil {
		return 0, r.err
	}
	defer lb.Release(context.Background())
	return e.final(ctx, key, lb.Token())
}

// put writes value to the object named key under lease l through the
// fencing transport, and tells the story of the answer.
func (e *demoEnv) put(ctx context.Context, l *client.Lease, wire http.RoundTripper, key, value string) (int, error) {
	if wire == nil {
		wire = http.DefaultTransport
	}
	hc := &http.Client{Transport: fencehttp.NewTransport(l, wire)}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, e.storeURL+"/v1/objects/"+key, strings.NewReader(value))
	if err != nil {
		return 0, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	actor := l.Owner()
	switch resp.StatusCode {
	case http.StatusNoContent, http.StatusOK, http.StatusCreated:
		e.story.say("store", "accepts %s's write %q with token %d", actor, value, l.Token())
	case http.StatusConflict:
		var stale string
		if p, err := fencehttp.DecodeProblem(resp.Body); err == nil {
			stale = fmt.Sprintf(" (presented %d, highest %d)", p.PresentedToken, p.HighestToken)
		}
		e.story.say("store", "REJECTS %s's write with token %d: 409 stale token%s", actor, l.Token(), stale)
	default:
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, fmt.Errorf("store answered %s: %s", resp.Status, body)
	}
	return resp.StatusCode, nil
}

// final reads the object back and reports whether a stale write won.
func (e *demoEnv) final(ctx context.Context, key string, newest uint64) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.storeURL+"/v1/objects/"+key, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("read back %q: %s", key, resp.Status)
	}
	token := resp.Header.Get(fencehttp.HeaderToken)
	if token == fmt.Sprint(newest) {
		e.story.say("result", "%q = %q (token %s): the newest holder's data survived", key, body, token)
		return 0, nil
	}
	e.story.say("result", "%q = %q (token %s): STALE OVERWRITE of the newest holder's data (token %d)", key, body, token, newest)
	return 1, nil
}

// serveDemoStore opens and serves the demo's reference store; stop closes it.
func serveDemoStore(ctx context.Context, cfg store.Config) (url string, stop func(), err error) {
	st, err := store.Open(cfg)
	if err != nil {
		return "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		st.Close()
		return "", nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	go st.Serve(ctx, ln)
	return "http://" + ln.Addr().String(), func() { cancel(); st.Close() }, nil
}
