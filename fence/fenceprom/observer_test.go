package fenceprom_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fenceprom"
)

func nop(context.Context) error { return nil }

func TestObserver(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	reg := prometheus.NewPedanticRegistry()
	memObs, err := fenceprom.NewObserver(reg, "memory")
	if err != nil {
		t.Fatal(err)
	}
	boltObs, err := fenceprom.NewObserver(reg, "bolt")
	if err != nil {
		t.Fatalf("second guard on one registry: %v", err)
	}
	// Asking again for "memory" feeds the same series.
	memObs2, err := fenceprom.NewObserver(reg, "memory")
	if err != nil {
		t.Fatalf("same guard name twice: %v", err)
	}

	mem := fence.NewMemory(fence.MemoryConfig{Observer: memObs})
	mem2 := fence.NewMemory(fence.MemoryConfig{Observer: memObs2})
	for _, tok := range []uint64{10, 10, 11, 10, 1} { // gaps 1 and 10
		_ = mem.Do(ctx, "a", tok, nop)
	}
	_ = mem2.Do(ctx, "b", 100, nop)
	_ = mem2.Do(ctx, "b", 50, nop) // gap 50
	// Duplicates are counted apart, and never in the token gap.
	seq := fence.WithSequence(ctx, 7)
	_ = mem2.Do(seq, "b", 100, nop)
	_ = mem2.Do(seq, "b", 100, nop)
	_ = mem.Do(seq, "a", 11, nop) // the first sequence under 11: accepted
	// A decision on another scope would never add a label: only guard and
	// result exist.
	boltObs.Observe(ctx, fence.Decision{Scope: "c", Presented: 3, Highest: 3, Accepted: true})

	const want = `
# HELP fenced_guard_decisions_total Mutations checked by a fencing guard, by result (accepted, rejected, or duplicate: already applied under its sequence).
# TYPE fenced_guard_decisions_total counter
fenced_guard_decisions_total{guard="bolt",result="accepted"} 1
fenced_guard_decisions_total{guard="bolt",result="duplicate"} 0
fenced_guard_decisions_total{guard="bolt",result="rejected"} 0
fenced_guard_decisions_total{guard="memory",result="accepted"} 6
fenced_guard_decisions_total{guard="memory",result="duplicate"} 1
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

func TestObserverConflict(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	// Something else already owns the name with other labels.
	reg.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fenced_guard_decisions_total", Help: "x",
	}, []string{"kind"}))
	obs, err := fenceprom.NewObserver(reg, "memory")
	if err == nil || obs != nil {
		t.Fatalf("NewObserver = %v, %v; want an error", obs, err)
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		t.Errorf("conflicting registration reported as already registered: %v", err)
	}
}
