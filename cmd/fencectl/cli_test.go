package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/internal/fencedtest"
)

// run executes fencectl with args against srv and returns its output.
func run(t *testing.T, srv *fencedtest.Server, args ...string) (string, error) {
	t.Helper()
	cmd := rootCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(append([]string{"--endpoint", srv.URL}, args...))
	err := cmd.ExecuteContext(context.Background())
	return out.String(), err
}

func TestCommands(t *testing.T) {
	srv := fencedtest.Start(t)
	c := srv.Client(t, client.Config{TTL: 5 * time.Second, Owner: "worker-7"})
	l, err := c.Acquire(context.Background(), "shards/3")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.Background())
	token := itoa(l.Token())

	out, err := run(t, srv, "list")
	if err != nil || !strings.Contains(out, "shards/3") || !strings.Contains(out, "worker-7") || !strings.Contains(out, token) {
		t.Fatalf("list: %v\n%s", err, out)
	}
	out, err = run(t, srv, "status")
	if err != nil || !strings.Contains(out, "serving as leader") || !strings.Contains(out, "1 current") {
		t.Fatalf("status: %v\n%s", err, out)
	}
	out, err = run(t, srv, "--json", "get", "shards/3")
	var got struct {
		Lease     leaseJSON `json:"lease"`
		LastToken uint64    `json:"lastToken"`
	}
	if err != nil || json.Unmarshal([]byte(out), &got) != nil || got.Lease.Token != l.Token() || got.LastToken != l.Token() {
		t.Fatalf("get --json: %v\n%s", err, out)
	}
	if out, err = run(t, srv, "renew", "shards/3", l.ID()); err != nil || !strings.Contains(out, token) {
		t.Fatalf("renew: %v\n%s", err, out)
	}
	if _, err = run(t, srv, "renew", "shards/3", "0000"); err == nil {
		t.Fatal("renew with a wrong lease id succeeded")
	}
	if out, err = run(t, srv, "release", "shards/3", l.ID()); err != nil || !strings.Contains(out, "released") {
		t.Fatalf("release: %v\n%s", err, out)
	}
	out, err = run(t, srv, "get", "shards/3")
	if err != nil || !strings.Contains(out, "is free (last token "+token+")") {
		t.Fatalf("get after release: %v\n%s", err, out)
	}
	for _, workload := range []string{"acquire-release", "renew-stream", "get"} {
		out, err = run(t, srv, "--json", "bench", "--workload", workload, "--clients", "2", "--duration", "300ms")
		var res BenchResult
		if err != nil || json.Unmarshal([]byte(out), &res) != nil || res.Ops == 0 || res.Errors != 0 || res.P99Ms < res.P50Ms {
			t.Fatalf("bench %s: %v %+v\n%s", workload, err, res, out)
		}
	}
}

func itoa(v uint64) string { return strconv.FormatUint(v, 10) }

// cancelOn cancels a context once the output written to it contains want.
type cancelOn struct {
	bytes.Buffer
	want   string
	cancel context.CancelFunc
}

func (w *cancelOn) Write(p []byte) (int, error) {
	n, err := w.Buffer.Write(p)
	if strings.Contains(w.String(), w.want) {
		w.cancel()
	}
	return n, err
}

// TestInspectionShowsNoLeaseID: get, list, status and watch show a lease's
// key, owner and token, never its ID, which renews and releases it.
func TestInspectionShowsNoLeaseID(t *testing.T) {
	srv := fencedtest.Start(t)
	c := srv.Client(t, client.Config{TTL: 5 * time.Second, Owner: "worker-9"})
	l, err := c.Acquire(context.Background(), "jobs/9")
	if err != nil {
		t.Fatal(err)
	}
	token := itoa(l.Token())
	for _, args := range [][]string{{"list"}, {"--json", "list"}, {"get", "jobs/9"}, {"--json", "get", "jobs/9"}, {"status"}, {"--json", "status"}} {
		out, err := run(t, srv, args...)
		if err != nil || !strings.Contains(out, "jobs/9") || !strings.Contains(out, token) {
			t.Fatalf("%q: %v\n%s", args, err, out)
		}
		if strings.Contains(out, l.ID()) {
			t.Errorf("%q shows the lease ID %s:\n%s", args, l.ID(), out)
		}
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, json := range []bool{false, true} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		want := "RELEASED"
		out := &cancelOn{want: want, cancel: cancel}
		cmd := rootCmd()
		cmd.SetOut(out)
		cmd.SetErr(out)
		args := []string{"--endpoint", srv.URL, "watch", "--after", itoa(l.Token() - 1), "jobs/"}
		if json {
			args = append([]string{"--json"}, args...)
		}
		cmd.SetArgs(args)
		err := cmd.ExecuteContext(ctx)
		timedOut := errors.Is(ctx.Err(), context.DeadlineExceeded)
		cancel()
		if err != nil || timedOut || !strings.Contains(out.String(), "worker-9") {
			t.Fatalf("%q: %v (timed out %v)\n%s", args, err, timedOut, out)
		}
		if strings.Contains(out.String(), l.ID()) {
			t.Errorf("%q shows the lease ID %s:\n%s", args, l.ID(), out)
		}
	}
}

// Every command that changes a lease says in its help what it does, what
// its exit statuses are, and shows an example.
func TestLeaseCommandsDocumented(t *testing.T) {
	for _, name := range []string{"acquire", "renew", "release", "revoke"} {
		cmd, _, err := rootCmd().Find([]string{name})
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"Exit status", "Example", "fencectl " + name} {
			if !strings.Contains(cmd.Long, want) {
				t.Errorf("%s --help does not say %q:\n%s", name, want, cmd.Long)
			}
		}
	}
}
