package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/internal/fencedtest"
)

func TestRunUnderLease(t *testing.T) {
	srv := fencedtest.Start(t)
	c := srv.Client(t, client.Config{TTL: 2 * time.Second})
	ctx := context.Background()

	t.Run("command finishes while held", func(t *testing.T) {
		l, err := c.Acquire(ctx, "exec/ok")
		if err != nil {
			t.Fatal(err)
		}
		envFile := filepath.Join(t.TempDir(), "env")
		err = runUnderLease(ctx, l, []string{"sh", "-c", `echo "$FENCING_TOKEN $FENCING_SCOPE $FENCING_LEASE_ID" > ` + envFile + `; exit 7`}, time.Second)
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != 7 {
			t.Fatalf("err = %v, want the command's exit status 7", err)
		}
		got, _ := os.ReadFile(envFile)
		want := strconv.FormatUint(l.Token(), 10) + " exec/ok " + l.ID() + "\n"
		if string(got) != want {
			t.Fatalf("command saw %q, want %q", got, want)
		}
		if r, err := c.Get(ctx, "exec/ok"); err == nil && r.Lease != nil {
			t.Fatal("lease not released after the command finished")
		}
	})

	for _, tc := range []struct {
		name   string
		script string
		want   int
	}{
		{"stops on SIGTERM", "sleep 30", exitLost},
		{"ignores SIGTERM", `trap "" TERM; while :; do sleep 0.05; done`, exitKilled},
	} {
		t.Run("lease lost, command "+tc.name, func(t *testing.T) {
			key := "exec/" + strings.ReplaceAll(tc.name, " ", "-")
			l, err := c.Acquire(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			start := time.Now()
			go func() { done <- runUnderLease(ctx, l, []string{"sh", "-c", tc.script}, 300*time.Millisecond) }()
			// The lease ends behind the holder's back; the next renewal is
			// refused and the command must be stopped.
			if err := c.Release(ctx, key, l.ID()); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				var ee *exitError
				if !errors.As(err, &ee) || ee.code != tc.want {
					t.Fatalf("err = %v, want exit status %d", err, tc.want)
				}
				if !errors.Is(err, client.ErrLost) {
					t.Fatalf("err = %v, want it to say the lease was lost", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("command still running %v after the lease was lost", time.Since(start))
			}
		})
	}
}

// acquire --wait --exec with a wait longer than the TTL: the command runs
// to completion under a live lease.
func TestAcquireWaitLongerThanTTLExec(t *testing.T) {
	srv := fencedtest.Start(t)
	ctx := context.Background()
	holder := srv.Client(t, client.Config{TTL: time.Second, Owner: "holder"})
	l, err := holder.Acquire(ctx, "exec/wait")
	if err != nil {
		t.Fatal(err)
	}
	release := time.AfterFunc(1500*time.Millisecond, func() { l.Release(ctx) })
	defer release.Stop()
	marker := filepath.Join(t.TempDir(), "done")
	// The command outlives a TTL, so it needs the lease to be renewed.
	_, err = run(t, srv, "acquire", "exec/wait", "--ttl", "1s", "--wait", "5s", "--exec", "--",
		"sh", "-c", `sleep 1.2; echo "$FENCING_TOKEN" > `+marker+`; exit 3`)
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != 3 {
		t.Fatalf("err = %v, want the command's exit status 3", err)
	}
	got, err := os.ReadFile(marker)
	if err != nil {
		t.Fatalf("the command did not finish: %v", err)
	}
	if token, err := strconv.ParseUint(strings.TrimSpace(string(got)), 10, 64); err != nil || token <= l.Token() {
		t.Fatalf("command saw token %q, want one above the holder's %d", got, l.Token())
	}
}

// acquire's exit statuses that are not the command's own: the conflict
// status (-E, as flock has it) and env's and timeout's 126 and 127 for a
// command that cannot be started, whose lease is released.
func TestAcquireExitStatuses(t *testing.T) {
	srv := fencedtest.Start(t)
	ctx := context.Background()
	holder := srv.Client(t, client.Config{TTL: 5 * time.Second, Owner: "holder"})
	l, err := holder.Acquire(ctx, "exec/held")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	dir := t.TempDir()
	notExec := filepath.Join(dir, "script")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\nexit 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ran := filepath.Join(dir, "ran")
	for _, tc := range []struct {
		name string
		args []string
		want int
	}{
		{"held", []string{"acquire", "exec/held", "--exec", "--", "touch", ran}, exitHeld},
		{"held, -E", []string{"acquire", "exec/held", "-E", "9", "--exec", "--", "touch", ran}, 9},
		{"held, --conflict-exit-code 0", []string{"acquire", "exec/held", "--conflict-exit-code", "0"}, 0},
		{"not found", []string{"acquire", "exec/free", "--exec", "--", "no-such-command-fencectl"}, exitNotFound},
		{"no such file", []string{"acquire", "exec/free", "--exec", "--", filepath.Join(dir, "absent")}, exitNotFound},
		{"not executable", []string{"acquire", "exec/free", "--exec", "--", notExec}, exitCannotRun},
		{"a directory", []string{"acquire", "exec/free", "--exec", "--", dir}, exitCannotRun},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := run(t, srv, tc.args...)
			var ee *exitError
			if !errors.As(err, &ee) || ee.code != tc.want {
				t.Fatalf("err = %v, want exit status %d", err, tc.want)
			}
			if _, err := os.Stat(ran); err == nil {
				t.Fatal("the command ran although the key was held")
			}
			if r, err := holder.Get(ctx, "exec/free"); err == nil && r.Lease != nil {
				t.Fatal("the lease of a command that could not start was not released")
			}
		})
	}
	if _, err := run(t, srv, "acquire", "exec/free", "-E", "256"); err == nil || !strings.Contains(err.Error(), "0 to 255") {
		t.Fatalf("-E 256: %v, want a range error", err)
	}
	if r, err := holder.Get(ctx, "exec/free"); err == nil && r.Lease != nil {
		t.Fatal("-E 256 acquired the key")
	}
}
