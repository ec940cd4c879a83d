package fence_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/internal/testutil"
)

func TestSlogObserver(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var buf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	g := fence.NewMemory(fence.MemoryConfig{Observer: fence.NewSlogObserver(logger)})

	steps := []struct {
		scope string
		token uint64
	}{
		{"orders/7", 42}, // accepted, highest before 0
		{"orders/7", 41}, // rejected, 1st
		{"orders/8", 5},  // accepted
		{"orders/7", 3},  // rejected, 2nd
		{"orders/7", 43}, // accepted, highest before 42
	}
	for _, s := range steps {
		_ = g.Do(ctx, s.scope, s.token, nop)
	}

	want := []map[string]any{
		{"level": "DEBUG", "scope": "orders/7", "presented_token": 42.0, "highest_token": 0.0},
		{"level": "WARN", "scope": "orders/7", "presented_token": 41.0, "highest_token": 42.0, "rejections": 1.0},
		{"level": "DEBUG", "scope": "orders/8", "presented_token": 5.0, "highest_token": 0.0},
		{"level": "WARN", "scope": "orders/7", "presented_token": 3.0, "highest_token": 42.0, "rejections": 2.0},
		{"level": "DEBUG", "scope": "orders/7", "presented_token": 43.0, "highest_token": 42.0},
	}
	sc := bufio.NewScanner(&buf)
	i := 0
	for ; sc.Scan(); i++ {
		if i >= len(want) {
			t.Fatalf("extra record %s", sc.Text())
		}
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatal(err)
		}
		for k, v := range want[i] {
			if rec[k] != v {
				t.Errorf("record %d: %s = %v, want %v (record %s)", i, k, rec[k], v, sc.Text())
			}
		}
		if _, ok := rec["rejections"]; ok != (want[i]["level"] == "WARN") {
			t.Errorf("record %d: rejections present = %v (record %s)", i, ok, sc.Text())
		}
		if msg, _ := rec["msg"].(string); msg == "" {
			t.Errorf("record %d has no message", i)
		}
	}
	if i != len(want) {
		t.Errorf("%d records, want %d", i, len(want))
	}
}

func TestSlogObserverRejectionsConcurrent(t *testing.T) {
	t.Parallel()
	var buf testutil.SyncBuffer
	obs := fence.NewSlogObserver(slog.New(slog.NewJSONHandler(&buf, nil)))
	const n = 200
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			obs.Observe(context.Background(), fence.Decision{Scope: "s", Presented: 1, Highest: 2})
		})
	}
	wg.Wait()
	// Every count from 1 to n appears exactly once.
	seen := make(map[float64]bool)
	sc := bufio.NewScanner(strings.NewReader(buf.String()))
	for sc.Scan() {
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatal(err)
		}
		r, _ := rec["rejections"].(float64)
		if seen[r] || r < 1 || r > n {
			t.Errorf("rejections = %v repeated or out of range", r)
		}
		seen[r] = true
	}
	if len(seen) != n {
		t.Errorf("%d distinct counts, want %d", len(seen), n)
	}
}
