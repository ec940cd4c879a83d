package fenceprom_test

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fenceprom"
)

// TestOwnerIsAnExemplar checks that the owner of a rejection rides on the
// rejected counter as an exemplar and never becomes a label.
func TestOwnerIsAnExemplar(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	obs, err := fenceprom.NewObserver(reg, "memory")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	long := strings.Repeat("w", 300)
	obs.Observe(ctx, fence.Decision{Scope: "s", Presented: 63, Highest: 64, Owner: "worker-A"})
	obs.Observe(ctx, fence.Decision{Scope: "s", Presented: 62, Highest: 64, Owner: long})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "fenced_guard_decisions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "owner" {
					t.Fatalf("owner is a label: %v", m)
				}
			}
			if m.GetCounter().GetValue() != 2 {
				continue
			}
			ex := m.GetCounter().GetExemplar()
			if ex == nil || len(ex.GetLabel()) != 1 || ex.GetLabel()[0].GetName() != "owner" {
				t.Fatalf("rejected counter exemplar %v", ex)
			}
			if got := ex.GetLabel()[0].GetValue(); got != long[:prometheus.ExemplarMaxRunes-len("owner")] {
				t.Errorf("exemplar owner %q (%d runes)", got, len(got))
			}
			return
		}
	}
	t.Fatal("no rejected counter with 2 rejections")
}
