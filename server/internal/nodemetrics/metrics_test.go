package nodemetrics

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/fencedio/fenced/lease"
	"github.com/fencedio/fenced/server/internal/apierr"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// fakeNode is a Node whose state the test sets.
type fakeNode struct {
	counts          Transitions
	ready           bool
	leases, waiters int
	calls, waiting  int
	leaseBytes      int64
}

func (f *fakeNode) node() Node {
	return Node{
		Counts:     &f.counts,
		Ready:      func() bool { return f.ready },
		Leases:     func() int { return f.leases },
		LeaseBytes: func() int64 { return f.leaseBytes },
		Waiters:    func() int { return f.waiters },
		Calls:      func() (int, int) { return f.calls, f.waiting },
		Raft:       func() *raft.Raft { return nil },
	}
}

func newTestMetrics(t *testing.T) (*Metrics, *fakeNode, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	f := new(fakeNode)
	m, err := New(reg, f.node())
	if err != nil {
		t.Fatal(err)
	}
	return m, f, reg
}

// scrape is every series reg serves, as name{label="value",...}: the value
// of a counter or gauge, the count and sum of a histogram (name_count,
// name_sum).
func scrape(t *testing.T, reg prometheus.Gatherer) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			series := func(suffix string) string {
				return f.GetName() + suffix + "{" + strings.Join(labels, ",") + "}"
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				got[series("")] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				got[series("")] = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				got[series("_count")] = float64(m.GetHistogram().GetSampleCount())
				got[series("_sum")] = m.GetHistogram().GetSampleSum()
			default:
				t.Fatalf("%s: unexpected type %v", f.GetName(), f.GetType())
			}
		}
	}
	return got
}

// diff lists the series whose values differ between want and got.
func diff(want, got map[string]float64) []string {
	var d []string
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if g, ok := got[k]; !ok || g != want[k] {
			d = append(d, fmt.Sprintf("%s = %v (served: %v), want %v", k, g, ok, want[k]))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[k]; !ok {
			d = append(d, fmt.Sprintf("%s = %v, not expected", k, got[k]))
		}
	}
	return d
}

// The collectors as a node served them before they moved here (scraped
// from a node's /metrics): name, type, help and label names. Dashboards
// and docs/observability.md name them; none may change.
var served = []string{
	`fenced_acquisitions_total COUNTER "Acquire requests by result." [result]`,
	`fenced_calls_in_progress GAUGE "API calls being worked on, unary and carried by Session streams (at most --max-calls-in-progress)." []`,
	`fenced_calls_waiting GAUGE "API calls waiting for their turn to be worked on, unary and carried by Session streams." []`,
	`fenced_expirations_total COUNTER "Leases expired by the leader." []`,
	`fenced_is_leader GAUGE "1 while this node is the leader and serving acquisitions." []`,
	`fenced_lease_bytes GAUGE "What the current leases count against --max-lease-bytes: key, owner and a fixed overhead each." []`,
	`fenced_leases_active GAUGE "Current leases." []`,
	`fenced_limit_refusals_total COUNTER "Requests, connections and streams refused or cut by a limit, by the flag that sets it." [limit]`,
	`fenced_raft_applied_index GAUGE "Index of the last log entry applied to the lease state machine." []`,
	`fenced_raft_apply_duration_seconds HISTOGRAM "Time from submitting a command to the log until it is applied." []`,
	`fenced_raft_commit_index GAUGE "Index of the last committed log entry known to this node." []`,
	`fenced_raft_log_write_duration_seconds HISTOGRAM "Time to write a batch of raft log entries, fsync included." []`,
	`fenced_raft_term GAUGE "Current raft term." []`,
	`fenced_releases_total COUNTER "Release requests by result." [result]`,
	`fenced_renewals_total COUNTER "Renew requests by result." [result]`,
	`fenced_request_duration_seconds HISTOGRAM "Lease API request latency by method." [method]`,
	`fenced_takeovers_total COUNTER "Grants of keys whose previous lease had expired rather than been released." []`,
	`fenced_tokens_issued_total COUNTER "Fencing tokens issued (grants applied on this node)." []`,
	`fenced_waiters GAUGE "Acquisitions waiting for a held key." []`,
}

// New registers exactly the collectors a node served, with their help
// texts, types, labels and buckets, every one (and every limit counted)
// named in docs/.
func TestNewRegistersTheServedCollectors(t *testing.T) {
	m, _, reg := newTestMetrics(t)
	m.ObserveRequest("Acquire", time.Millisecond) // a histogram vector is served once it has a series
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	buckets := map[string][]float64{}
	for _, f := range families {
		labels := []string{}
		for _, l := range f.GetMetric()[0].GetLabel() {
			labels = append(labels, l.GetName())
		}
		got = append(got, fmt.Sprintf("%s %s %q %v", f.GetName(), f.GetType(), f.GetHelp(), labels))
		if h := f.GetMetric()[0].GetHistogram(); h != nil {
			for _, b := range h.GetBucket() {
				buckets[f.GetName()] = append(buckets[f.GetName()], b.GetUpperBound())
			}
		}
	}
	sort.Strings(got)
	if !slices.Equal(got, served) {
		t.Errorf("registered:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(served, "\n"))
	}
	// 16 buckets doubling from 0.1ms, 50µs for log writes.
	for name, first := range map[string]float64{
		"fenced_raft_apply_duration_seconds":     0.0001,
		"fenced_raft_log_write_duration_seconds": 0.00005,
		"fenced_request_duration_seconds":        0.0001,
	} {
		b := buckets[name]
		if len(b) != 16 || b[0] != first || b[15] != first*(1<<15) {
			t.Errorf("%s buckets %v, want 16 doubling from %v", name, b, first)
		}
	}
	var docs strings.Builder
	for _, name := range []string{"observability.md", "configuration.md"} {
		b, err := os.ReadFile("../../../docs/" + name)
		if err != nil {
			t.Fatal(err)
		}
		docs.Write(b)
	}
	for _, f := range families {
		if !strings.Contains(docs.String(), "`"+f.GetName()) {
			t.Errorf("%s is not in docs/", f.GetName())
		}
	}
	for series := range scrape(t, reg) {
		if l, ok := strings.CutPrefix(series, "fenced_limit_refusals_total"); ok && !strings.Contains(docs.String(), l+"`") {
			t.Errorf("%s is not in docs/configuration.md", series)
		}
	}
	if _, err := New(reg, new(fakeNode).node()); err == nil {
		t.Error("New registered the collectors twice in one registry")
	}
}

// Every outcome counts once, under the label of its error, and a refusal
// by a limit also under that limit; every label is served from the start.
func TestCountsByResult(t *testing.T) {
	m, _, reg := newTestMetrics(t)
	want := scrape(t, reg)
	for _, r := range []string{"granted", "held", "invalid", "error"} {
		if v, ok := want[`fenced_acquisitions_total{result="`+r+`"}`]; !ok || v != 0 {
			t.Errorf("acquisitions %s: %v (served: %v), want 0 from the start", r, v, ok)
		}
	}
	for _, name := range []string{"fenced_renewals_total", "fenced_releases_total"} {
		for _, r := range []string{"not_found", "invalid", "error"} {
			if v, ok := want[name+`{result="`+r+`"}`]; !ok || v != 0 {
				t.Errorf("%s %s: %v (served: %v), want 0 from the start", name, r, v, ok)
			}
		}
	}
	for _, l := range limitNames {
		if v, ok := want[`fenced_limit_refusals_total{limit="`+l+`"}`]; !ok || v != 0 {
			t.Errorf("refusals %s: %v (served: %v), want 0 from the start", l, v, ok)
		}
	}
	held := &lease.HeldError{Key: "k", Owner: "o", Token: 3}
	quota := &apierr.QuotaError{Quota: "max-leases-per-owner", Of: "owner", Owner: "o", Used: 2, Limit: 2}
	for _, c := range []struct {
		name   string
		count  func(error)
		err    error
		series []string
	}{
		{"acquire granted", m.CountAcquisition, nil, []string{`fenced_acquisitions_total{result="granted"}`}},
		{"acquire held", m.CountAcquisition, fmt.Errorf("wrapped: %w", held), []string{`fenced_acquisitions_total{result="held"}`}},
		{"acquire invalid", m.CountAcquisition, apierr.Invalidf("key %q", ""), []string{`fenced_acquisitions_total{result="invalid"}`}},
		{"acquire error", m.CountAcquisition, errors.New("disk on fire"), []string{`fenced_acquisitions_total{result="error"}`}},
		{"acquire over max-leases", m.CountAcquisition, apierr.ErrTooManyLeases,
			[]string{`fenced_acquisitions_total{result="error"}`, `fenced_limit_refusals_total{limit="max-leases"}`}},
		{"acquire over max-waiters", m.CountAcquisition, fmt.Errorf("wait: %w", apierr.ErrTooManyWaiters),
			[]string{`fenced_acquisitions_total{result="error"}`, `fenced_limit_refusals_total{limit="max-waiters"}`}},
		{"acquire over a quota", m.CountAcquisition, quota,
			[]string{`fenced_acquisitions_total{result="error"}`, `fenced_limit_refusals_total{limit="max-leases-per-owner"}`}},
		{"renew renewed", m.CountRenewal, nil, []string{`fenced_renewals_total{result="renewed"}`}},
		{"renew not held", m.CountRenewal, lease.ErrNotHeld, []string{`fenced_renewals_total{result="not_found"}`}},
		{"renew invalid", m.CountRenewal, apierr.ErrInvalid, []string{`fenced_renewals_total{result="invalid"}`}},
		{"renew error", m.CountRenewal, apierr.ErrTooManyLeases, []string{`fenced_renewals_total{result="error"}`}},
		{"release released", m.CountRelease, nil, []string{`fenced_releases_total{result="released"}`}},
		{"release not held", m.CountRelease, fmt.Errorf("release: %w", lease.ErrNotHeld), []string{`fenced_releases_total{result="not_found"}`}},
		{"release invalid", m.CountRelease, apierr.Invalidf("lease id"), []string{`fenced_releases_total{result="invalid"}`}},
		{"release error", m.CountRelease, quota, []string{`fenced_releases_total{result="error"}`}},
	} {
		c.count(c.err)
		for _, s := range c.series {
			want[s]++
		}
		if d := diff(want, scrape(t, reg)); d != nil {
			t.Fatalf("after %s (%v):\n%s", c.name, c.err, strings.Join(d, "\n"))
		}
	}
	m.Refused("max-conns-per-client")
	want[`fenced_limit_refusals_total{limit="max-conns-per-client"}`]++
	if d := diff(want, scrape(t, reg)); d != nil {
		t.Errorf("after Refused:\n%s", strings.Join(d, "\n"))
	}
}

// The latencies land in their histograms, by method for requests.
func TestObservesLatencies(t *testing.T) {
	m, _, reg := newTestMetrics(t)
	want := scrape(t, reg)
	m.ObserveRequest("Acquire", 250*time.Millisecond)
	m.ObserveRequest("Acquire", 250*time.Millisecond)
	m.ObserveRequest("Get", 125*time.Millisecond)
	m.ObserveApply(2 * time.Second)
	m.ObserveLogWrite(0.5)
	want[`fenced_request_duration_seconds_count{method="Acquire"}`] = 2
	want[`fenced_request_duration_seconds_sum{method="Acquire"}`] = 0.5
	want[`fenced_request_duration_seconds_count{method="Get"}`] = 1
	want[`fenced_request_duration_seconds_sum{method="Get"}`] = 0.125
	want[`fenced_raft_apply_duration_seconds_count{}`]++
	want[`fenced_raft_apply_duration_seconds_sum{}`] += 2
	want[`fenced_raft_log_write_duration_seconds_count{}`]++
	want[`fenced_raft_log_write_duration_seconds_sum{}`] += 0.5
	if d := diff(want, scrape(t, reg)); d != nil {
		t.Errorf("after the observations:\n%s", strings.Join(d, "\n"))
	}
}

// The gauges and the transition counters read the node at each scrape;
// the raft gauges read 0 while it has no raft.
func TestReadsTheNodeAtScrape(t *testing.T) {
	_, f, reg := newTestMetrics(t)
	want := scrape(t, reg)
	for _, name := range []string{"fenced_is_leader", "fenced_leases_active", "fenced_waiters", "fenced_calls_in_progress", "fenced_calls_waiting", "fenced_raft_term",
		"fenced_raft_commit_index", "fenced_raft_applied_index", "fenced_expirations_total", "fenced_takeovers_total",
		"fenced_tokens_issued_total"} {
		if v, ok := want[name+"{}"]; !ok || v != 0 {
			t.Errorf("%s = %v (served: %v), want 0 at first", name, v, ok)
		}
	}
	f.ready, f.leases, f.waiters, f.calls, f.waiting = true, 7, 3, 64, 9
	f.counts.Acquired.Add(5)
	f.counts.Released.Add(1) // /v1/stats's only: no counter of releases applied
	f.counts.Expired.Add(2)
	f.counts.Takeovers.Add(1)
	want["fenced_is_leader{}"] = 1
	want["fenced_leases_active{}"] = 7
	want["fenced_waiters{}"] = 3
	want["fenced_calls_in_progress{}"] = 64
	want["fenced_calls_waiting{}"] = 9
	want["fenced_tokens_issued_total{}"] = 5
	want["fenced_expirations_total{}"] = 2
	want["fenced_takeovers_total{}"] = 1
	if d := diff(want, scrape(t, reg)); d != nil {
		t.Errorf("after the node changed:\n%s", strings.Join(d, "\n"))
	}
	f.ready = false
	want["fenced_is_leader{}"] = 0
	if d := diff(want, scrape(t, reg)); d != nil {
		t.Errorf("after the node stopped leading:\n%s", strings.Join(d, "\n"))
	}
}
