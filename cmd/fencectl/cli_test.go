package main

import (
	"bytes"
	"context"
	"encoding/json"
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
