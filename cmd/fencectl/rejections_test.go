package main

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/internal/fencedtest"
)

func TestRejections(t *testing.T) {
	srv := fencedtest.Start(t)
	c := srv.Client(t, client.Config{})
	ctx := t.Context()
	a, err := c.Acquire(ctx, "jobs/1", client.WithOwner("worker-A"))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	b, err := c.Acquire(ctx, "jobs/1", client.WithOwner("worker-B"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ReportRejections(ctx, []client.StaleRejection{
		{Scope: "jobs/1", Presented: a.Token(), Highest: b.Token(), Owner: "worker-A", Resource: "ledger-http", Count: 3},
	}); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, srv, "rejections")
	if err != nil {
		t.Fatal(err)
	}
	want := "worker-A's token " + itoa(a.Token()) + " refused 3× by ledger-http after worker-B's " + itoa(b.Token())
	if !strings.Contains(out, want) || !strings.Contains(out, "3 rejections recorded") {
		t.Errorf("rejections:\n%s\nwant %q", out, want)
	}
	out, err = run(t, srv, "--json", "rejections", "jobs/")
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Total      uint64          `json:"total"`
		Rejections []rejectionJSON `json:"rejections"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if got.Total != 3 || len(got.Rejections) != 1 {
		t.Fatalf("--json: %s", out)
	}
	r := got.Rejections[0]
	if r.PresentedToken != itoa(a.Token()) || r.HighestOwner != "worker-B" || r.PresentedOwner != "worker-A" ||
		r.Count != 3 || r.PresentedGranted == "" || r.HighestGranted == "" {
		t.Errorf("--json entry %+v", r)
	}
}

func TestRejectionsFollow(t *testing.T) {
	srv := fencedtest.Start(t)
	c := srv.Client(t, client.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// Each report adds one to the entry, so the first line the stream shows
	// has a count of 1 or more: which, depends on when it subscribed.
	out := &cancelOn{want: "× by ledger-http after an unknown owner's 9", cancel: cancel}
	cmd := rootCmd()
	cmd.SetOut(out)
	cmd.SetErr(out)
	cmd.SetArgs([]string{"--endpoint", srv.URL, "rejections", "--follow", "jobs/"})
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	// Report until the stream, subscribed at some point, shows one.
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for ctx.Err() == nil {
		if _, err := c.ReportRejections(ctx, []client.StaleRejection{{Scope: "jobs/1", Presented: 8, Highest: 9,
			Owner: "worker-B", Resource: "ledger-http"}}); err != nil && ctx.Err() == nil {
			t.Fatal(err)
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
		}
	}
	if err := <-done; err != nil {
		t.Fatalf("rejections --follow: %v\n%s", err, out.String())
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatalf("the rejection never showed:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "  jobs/1: worker-B's token 8 refused ") {
		t.Errorf("output:\n%s", out.String())
	}
}
