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
		if _, ok, _, _ := c.Get(ctx, "exec/ok"); ok {
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
