package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/internal/testutil"
)

// jsonLines parses every line of out as a JSON object with a level and a
// message, and returns them.
func jsonLines(t *testing.T, out []byte) []map[string]any {
	t.Helper()
	var recs []map[string]any
	for i, line := range bytes.Split(bytes.TrimRight(out, "\n"), []byte("\n")) {
		var rec map[string]any
		if err := json.Unmarshal(line, &rec); err != nil {
			t.Errorf("line %d is not JSON (%v): %s", i+1, err, line)
			continue
		}
		if rec["level"] == nil || rec["msg"] == nil {
			t.Errorf("line %d has no level or msg: %s", i+1, line)
		}
		recs = append(recs, rec)
	}
	return recs
}

// TestJSONLogFormat: with --log-format json every line fenced writes is a
// JSON record, raft's own included (they carry module=raft), from start to
// a clean stop, and so is the error that ends a node that cannot serve.
func TestJSONLogFormat(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildFenced(t)
	dir := t.TempDir()
	logPath := filepath.Join(dir, "fenced.log")
	// A single node logs a raft warning as it elects itself.
	p := startFenced(t, bin, filepath.Join(dir, "data"), logPath, "--log-format", "json", "--log-level", "debug")
	c := newClient(p.url)
	ctx := context.Background()
	res, err := c.Acquire(ctx, connect.NewRequest(&fencedv1.AcquireRequest{Key: "logs/1", Owner: "a", TtlMs: 5000}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Release(ctx, connect.NewRequest(&fencedv1.ReleaseRequest{Key: "logs/1", LeaseId: res.Msg.Lease.GetLeaseId()})); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("fenced did not stop on SIGTERM")
	}
	out, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	msgs := map[string]bool{}
	raft := 0
	for _, rec := range jsonLines(t, out) {
		msgs[rec["msg"].(string)] = true
		if m, _ := rec["module"].(string); strings.HasPrefix(m, "raft") {
			raft++
		}
	}
	for _, want := range []string{"fenced starting", "lease acquired", "lease released", "fenced stopped"} {
		if !msgs[want] {
			t.Errorf("no %q record:\n%s", want, out)
		}
	}
	if raft == 0 {
		t.Errorf("no record from raft (module=raft); its lines must come through the same JSON log:\n%s", out)
	}

	// A node, or a store, that cannot listen says so in JSON too, with the
	// remedy.
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, args := range [][]string{
		{"--data-dir", filepath.Join(dir, "data2"), "--listen", "999.1.1.1:1", "--raft-listen", testutil.MustFreeAddr(t), "--log-format", "json"},
		{"store", "--data-dir", filepath.Join(dir, "store"), "--listen", "999.1.1.1:1", "--log-format", "json"},
	} {
		cmd := exec.CommandContext(ctx, bin, args...)
		var stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stderr, &stderr
		var exit *exec.ExitError
		if err := cmd.Run(); !errors.As(err, &exit) || exit.ExitCode() != 1 {
			t.Fatalf("fenced %q: %v, want exit status 1\n%s", args, err, &stderr)
		}
		recs := jsonLines(t, stderr.Bytes())
		if len(recs) == 0 {
			t.Fatalf("fenced %q wrote nothing", args)
		}
		last := recs[len(recs)-1]
		if last["level"] != "ERROR" || !strings.Contains(fmt.Sprint(last["err"]), "999.1.1.1:1") || !strings.Contains(fmt.Sprint(last["hint"]), "--listen") {
			t.Errorf("fenced %q: last record %v, want the error with its hint", args, last)
		}
	}
}
