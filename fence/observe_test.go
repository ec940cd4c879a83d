package fence_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fencedio/fenced/fence"
)

func TestSlogObserver(t *testing.T) {
	ctx := context.Background()
	var buf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	g := fence.NewMemory(fence.WithObserver(fence.NewSlogObserver(logger)))

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
	var buf lockedBuffer
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

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestPrometheusObserver(t *testing.T) {
	ctx := context.Background()
	reg := prometheus.NewPedanticRegistry()
	memObs, err := fence.NewPrometheusObserver(reg, "memory")
	if err != nil {
		t.Fatal(err)
	}
	boltObs, err := fence.NewPrometheusObserver(reg, "bolt")
	if err != nil {
		t.Fatalf("second guard on one registry: %v", err)
	}
	// Asking again for "memory" feeds the same series.
	memObs2, err := fence.NewPrometheusObserver(reg, "memory")
	if err != nil {
		t.Fatalf("same guard name twice: %v", err)
	}

	mem := fence.NewMemory(fence.WithObserver(memObs))
	mem2 := fence.NewMemory(fence.WithObserver(memObs2))
	for _, tok := range []uint64{10, 10, 11, 10, 1} { // gaps 1 and 10
		_ = mem.Do(ctx, "a", tok, nop)
	}
	_ = mem2.Do(ctx, "b", 100, nop)
	_ = mem2.Do(ctx, "b", 50, nop) // gap 50
	// A decision on another scope would never add a label: only guard and
	// result exist.
	boltObs.Observe(ctx, fence.Decision{Scope: "c", Presented: 3, Highest: 3, Accepted: true})

	const want = `
# HELP fenced_guard_decisions_total Mutations checked by a fencing guard, by result (accepted or rejected).
# TYPE fenced_guard_decisions_total counter
fenced_guard_decisions_total{guard="bolt",result="accepted"} 1
fenced_guard_decisions_total{guard="bolt",result="rejected"} 0
fenced_guard_decisions_total{guard="memory",result="accepted"} 4
fenced_guard_decisions_total{guard="memory",result="rejected"} 3
# HELP fenced_guard_token_gap For rejected mutations, the highest accepted token minus the presented one.
# TYPE fenced_guard_token_gap histogram
fenced_guard_token_gap_bucket{guard="bolt",le="1"} 0
fenced_guard_token_gap_bucket{guard="bolt",le="4"} 0
fenced_guard_token_gap_bucket{guard="bolt",le="16"} 0
fenced_guard_token_gap_bucket{guard="bolt",le="64"} 0
fenced_guard_token_gap_bucket{guard="bolt",le="256"} 0
fenced_guard_token_gap_bucket{guard="bolt",le="1024"} 0
fenced_guard_token_gap_bucket{guard="bolt",le="4096"} 0
fenced_guard_token_gap_bucket{guard="bolt",le="16384"} 0
fenced_guard_token_gap_bucket{guard="bolt",le="65536"} 0
fenced_guard_token_gap_bucket{guard="bolt",le="262144"} 0
fenced_guard_token_gap_bucket{guard="bolt",le="+Inf"} 0
fenced_guard_token_gap_sum{guard="bolt"} 0
fenced_guard_token_gap_count{guard="bolt"} 0
fenced_guard_token_gap_bucket{guard="memory",le="1"} 1
fenced_guard_token_gap_bucket{guard="memory",le="4"} 1
fenced_guard_token_gap_bucket{guard="memory",le="16"} 2
fenced_guard_token_gap_bucket{guard="memory",le="64"} 3
fenced_guard_token_gap_bucket{guard="memory",le="256"} 3
fenced_guard_token_gap_bucket{guard="memory",le="1024"} 3
fenced_guard_token_gap_bucket{guard="memory",le="4096"} 3
fenced_guard_token_gap_bucket{guard="memory",le="16384"} 3
fenced_guard_token_gap_bucket{guard="memory",le="65536"} 3
fenced_guard_token_gap_bucket{guard="memory",le="262144"} 3
fenced_guard_token_gap_bucket{guard="memory",le="+Inf"} 3
fenced_guard_token_gap_sum{guard="memory"} 61
fenced_guard_token_gap_count{guard="memory"} 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) != 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}

func TestPrometheusObserverConflict(t *testing.T) {
	reg := prometheus.NewRegistry()
	// Something else already owns the name with other labels.
	reg.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fenced_guard_decisions_total", Help: "x",
	}, []string{"kind"}))
	obs, err := fence.NewPrometheusObserver(reg, "memory")
	if err == nil || obs != nil {
		t.Fatalf("NewPrometheusObserver = %v, %v; want an error", obs, err)
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		t.Errorf("conflicting registration reported as already registered: %v", err)
	}
}
