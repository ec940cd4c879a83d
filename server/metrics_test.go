package server

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// The transition counters of /metrics and /v1/stats are one count, and
// one gauge says whether this node leads.
func TestTransitionCountsHaveOneSource(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := newTestServer(t, Config{Registerer: reg, Gatherer: reg})
	ctx := context.Background()
	for _, key := range []string{"m/a", "m/b", "m/c"} {
		l, err := s.Acquire(ctx, key, "o", time.Minute, 0)
		if err != nil {
			t.Fatal(err)
		}
		if key != "m/c" {
			if err := s.Release(ctx, key, l.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*dto.MetricFamily{}
	for _, f := range families {
		got[f.GetName()] = f
	}
	st := s.Stats()
	if st.Acquired != 3 || st.Released != 2 {
		t.Fatalf("stats: %+v, want 3 acquired and 2 released", st)
	}
	for name, want := range map[string]uint64{
		"fenced_tokens_issued_total": st.Acquired,
		"fenced_expirations_total":   st.Expired,
		"fenced_takeovers_total":     st.Takeovers,
	} {
		f := got[name]
		if f == nil || f.GetType() != dto.MetricType_COUNTER || f.GetMetric()[0].GetCounter().GetValue() != float64(want) {
			t.Errorf("%s = %v, want a counter at %d as in /v1/stats", name, f, want)
		}
	}
	leaderGauges := 0
	for name := range got {
		if name == "fenced_is_leader" || name == "fenced_raft_leader" {
			leaderGauges++
		}
	}
	if f := got["fenced_is_leader"]; leaderGauges != 1 || f == nil || f.GetMetric()[0].GetGauge().GetValue() != 1 {
		t.Errorf("leader gauges: %d, fenced_is_leader %v; want only fenced_is_leader, at 1", leaderGauges, f)
	}
}
