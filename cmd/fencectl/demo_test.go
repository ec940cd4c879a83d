package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("replays two stories with real TTLs")
	}
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
