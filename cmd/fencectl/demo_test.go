package main

import (
	"bytes"
	"context"
	"github.com/fencedio/fenced/internal/testenv"
	"strings"
	"testing"
	"time"
)

func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("replays two stories with real TTLs")
	}
	testenv.SkipUnlessLong(t)
	for _, tc := range []struct {
		noFencing              bool
		wantRejects, wantStale int
	}{
		{noFencing: false, wantRejects: 2, wantStale: 0},
		{noFencing: true, wantRejects: 0, wantStale: 2},
	} {
		var out bytes.Buffer
		err := runDemo(context.Background(), &out, tc.noFencing, 500*time.Millisecond)
		if err != nil {
			t.Fatalf("noFencing=%v: %v\n%s", tc.noFencing, err, out.String())
		}
		got := out.String()
		if n := strings.Count(got, "REJECTS"); n != tc.wantRejects {
			t.Errorf("noFencing=%v: %d rejections, want %d\n%s", tc.noFencing, n, tc.wantRejects, got)
		}
		// fenced learns of every rejection from the store's reporter.
		if n := strings.Count(got, "refused 1× by demo-store after B's"); n != tc.wantRejects {
			t.Errorf("noFencing=%v: fenced recorded %d rejections, want %d\n%s", tc.noFencing, n, tc.wantRejects, got)
		}
		if n := strings.Count(got, "STALE OVERWRITE"); n != tc.wantStale {
			t.Errorf("noFencing=%v: %d stale overwrites, want %d\n%s", tc.noFencing, n, tc.wantStale, got)
		}
	}
}

// demo starts its own server: its help lists only its own flags, and a
// global flag given to it is refused, not ignored.
func TestDemoFlags(t *testing.T) {
	help := func(args ...string) string {
		t.Helper()
		cmd := rootCmd()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs(args)
		if err := cmd.ExecuteContext(context.Background()); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return out.String()
	}
	got := help("demo", "--help")
	for _, want := range []string{"--no-fencing", "--ttl"} {
		if !strings.Contains(got, want) {
			t.Errorf("demo --help does not list %s:\n%s", want, got)
		}
	}
	for _, unused := range []string{"--endpoint", "--json", "--timeout", "--cacert", "--token", "Global Flags"} {
		if strings.Contains(got, unused) {
			t.Errorf("demo --help lists %s, which demo does not use:\n%s", unused, got)
		}
	}
	if got := help("list", "--help"); !strings.Contains(got, "--endpoint") {
		t.Errorf("list --help lost the global flags:\n%s", got)
	}
	cmd := rootCmd()
	cmd.SetOut(new(bytes.Buffer))
	cmd.SetArgs([]string{"demo", "--endpoint", "http://127.0.0.1:1"})
	if err := cmd.ExecuteContext(context.Background()); err == nil || !strings.Contains(err.Error(), "--endpoint") {
		t.Errorf("demo --endpoint: %v, want it refused", err)
	}
}
