package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/client/election"
	"github.com/fencedio/fenced/internal/fencedtest"
	"github.com/fencedio/fenced/internal/testutil"
)

// startElect runs fencectl elect with args until ctx ends, and returns its
// output, line by line, and its result.
func startElect(ctx context.Context, srv *fencedtest.Server, args ...string) (*bufio.Scanner, <-chan error) {
	r, w := io.Pipe()
	cmd := rootCmd()
	cmd.SetOut(w)
	cmd.SetArgs(append([]string{"--endpoint", srv.URL, "elect"}, args...))
	done := make(chan error, 1)
	go func() {
		err := cmd.ExecuteContext(ctx)
		w.Close()
		done <- err
	}()
	return bufio.NewScanner(r), done
}

func nextLine(t *testing.T, s *bufio.Scanner) string {
	t.Helper()
	if !s.Scan() {
		t.Fatalf("no more output: %v", s.Err())
	}
	return s.Text()
}

// elect campaigns, prints "TOKEN VALUE" once elected, and resigns on
// Ctrl-C; --listen prints every new leader.
func TestElect(t *testing.T) {
	srv := fencedtest.Start(t)
	e := election.New(srv.Client(t, client.Config{}))
	bg := context.Background()
	first, err := e.Campaign(bg, "elect/svc", "first")
	if err != nil {
		t.Fatal(err)
	}

	lctx, stopListen := context.WithCancel(bg)
	listened, listenDone := startElect(lctx, srv, "elect/svc", "--listen")
	if got, want := nextLine(t, listened), fmt.Sprintf("%d first", first.Token()); got != want {
		t.Fatalf("--listen printed %q, want %q", got, want)
	}

	ctx, interrupt := context.WithCancel(bg)
	out, done := startElect(ctx, srv, "elect/svc", "second value")
	waitForWaiter(t, srv)
	first.Resign(bg)
	line := nextLine(t, out)
	leader, err := e.Leader(bg, "elect/svc")
	if err != nil || line != fmt.Sprintf("%d second value", leader.Token) || leader.Value != "second value" {
		t.Fatalf("elect printed %q; leader %+v, %v", line, leader, err)
	}
	if got := nextLine(t, listened); got != line {
		t.Fatalf("--listen printed %q, want %q", got, line)
	}
	interrupt()
	if err := <-done; err != nil {
		t.Fatalf("elect after Ctrl-C: %v", err)
	}
	if _, err := e.Leader(bg, "elect/svc"); !errors.Is(err, election.ErrNoLeader) {
		t.Fatalf("after Ctrl-C the leadership was not resigned: %v", err)
	}
	stopListen()
	if err := <-listenDone; err != nil {
		t.Fatalf("elect --listen after Ctrl-C: %v", err)
	}
}

// elect --exec runs the command once elected, with the token in its
// environment, and exits with its status.
func TestElectExec(t *testing.T) {
	srv := fencedtest.Start(t)
	envFile := filepath.Join(t.TempDir(), "env")
	_, err := run(t, srv, "elect", "elect/job", "me", "--exec", "--",
		"sh", "-c", `echo "$FENCING_TOKEN $FENCING_SCOPE" > `+envFile+`; exit 4`)
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != 4 {
		t.Fatalf("err = %v, want the command's exit status 4", err)
	}
	got, err := os.ReadFile(envFile)
	if err != nil {
		t.Fatal(err)
	}
	c := srv.Client(t, client.Config{})
	r, err := c.Get(context.Background(), "elect/job")
	if err != nil || r.Lease != nil {
		t.Fatalf("after the command: %+v, %v; want the key free", r, err)
	}
	if want := fmt.Sprintf("%d elect/job\n", r.LastToken); string(got) != want {
		t.Fatalf("command saw %q, want %q", got, want)
	}
}

func TestElectUsage(t *testing.T) {
	srv := fencedtest.Start(t)
	for _, args := range [][]string{
		{"elect"},
		{"elect", "n", "v", "extra"},
		{"elect", "n", "v", "--listen"},
		{"elect", "n", "--listen", "--exec", "--", "true"},
		{"elect", "n", "--exec"},
		{"elect", "n", "v", "x", "--exec", "--", "true"},
	} {
		if _, err := run(t, srv, args...); err == nil {
			t.Errorf("fencectl %s: no error", strings.Join(args, " "))
		}
	}
	c := srv.Client(t, client.Config{})
	if r, err := c.Get(context.Background(), "n"); err == nil && r.Lease != nil {
		t.Error("a refused command campaigned")
	}
}

// waitForWaiter waits until one acquisition waits in line on srv.
func waitForWaiter(t *testing.T, srv *fencedtest.Server) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, func() error {
		if n := srv.Stats().Waiters; n != 1 {
			return fmt.Errorf("%d waiters", n)
		}
		return nil
	})
}
