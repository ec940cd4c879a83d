package nodemetrics

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/fencedio/fenced/lease"
	"github.com/fencedio/fenced/server/internal/apierr"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
)

// Transitions counts the transitions applied since this process started,
// replays of the log at start-up excluded. They are the one count of
// transitions: /v1/stats reads them, and so do the Prometheus counters
// (counterFunc).
type Transitions struct {
	Acquired, Released, Expired, Takeovers atomic.Uint64
}

// Node is what the collectors read of the node, at scrape time.
type Node struct {
	// Counts are the node's transitions: fenced_expirations_total,
	// fenced_takeovers_total and fenced_tokens_issued_total read them.
	Counts *Transitions
	// Ready reports whether the node leads and serves acquisitions
	// (fenced_is_leader).
	Ready func() bool
	// Leases is the number of current leases (fenced_leases_active).
	Leases func() int
	// LeaseBytes is what the current leases count against
	// --max-lease-bytes (fenced_lease_bytes).
	LeaseBytes func() int64
	// Waiters is the number of acquisitions waiting for a held key
	// (fenced_waiters).
	Waiters func() int
	// Calls is the number of API calls worked on (fenced_calls_in_progress)
	// and of those waiting for their turn (fenced_calls_waiting).
	Calls func() (inProgress, waiting int)
	// Raft is the node's raft, nil while it has none (the fenced_raft_*
	// gauges read 0 then).
	Raft func() *raft.Raft
}

// Metrics are the node's Prometheus collectors. No label carries a key.
type Metrics struct {
	acquisitions *prometheus.CounterVec   // result: granted, held, invalid, error
	renewals     *prometheus.CounterVec   // result: renewed, not_found, invalid, error
	renewed      prometheus.Counter       // renewals{result="renewed"}, for the hot path
	releases     *prometheus.CounterVec   // result: released, not_found, invalid, error
	requests     *prometheus.HistogramVec // method
	apply        prometheus.Histogram     // submit to applied, for writes of this node
	fsync        prometheus.Histogram     // one raft log write, including fsync
	refusals     *prometheus.CounterVec   // limit: the flag of the limit that refused
}

// limitNames are the limits fenced_limit_refusals_total counts, by the
// flag that sets each.
var limitNames = []string{"max-leases", "max-lease-bytes", "max-leases-per-owner", "max-leases-per-client", "max-waiters",
	"max-waiters-per-owner", "max-waiters-per-client", "max-calls-per-client", "max-conns-per-client", "max-watchers",
	"max-watchers-per-client", "max-event-subscribers", "max-event-subscribers-per-client", "stream-unacked-bytes",
	"max-leases-per-network", "max-waiters-per-network", "max-calls-per-network", "max-watchers-per-network",
	"max-event-subscribers-per-network", "max-conns-per-network", "max-sessions", "max-sessions-per-client",
	"max-sessions-per-network"}

// Refused counts a refusal by the limit named (one of limitNames).
func (m *Metrics) Refused(limit string) { m.refusals.WithLabelValues(limit).Inc() }

// countRefusal counts err if a limit refused it.
func (m *Metrics) countRefusal(err error) {
	var q *apierr.QuotaError
	switch {
	case err == nil:
	case errors.As(err, &q):
		m.Refused(q.Quota)
	case errors.Is(err, apierr.ErrTooManyLeases):
		m.Refused("max-leases")
	case errors.Is(err, apierr.ErrTooManyLeaseBytes):
		m.Refused("max-lease-bytes")
	case errors.Is(err, apierr.ErrTooManyWaiters):
		m.Refused("max-waiters")
	}
}

// New makes the node's collectors, reading n, and registers them with reg.
func New(reg prometheus.Registerer, n Node) (*Metrics, error) {
	m := &Metrics{
		acquisitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fenced_acquisitions_total", Help: "Acquire requests by result.",
		}, []string{"result"}),
		renewals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fenced_renewals_total", Help: "Renew requests by result.",
		}, []string{"result"}),
		releases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fenced_releases_total", Help: "Release requests by result.",
		}, []string{"result"}),
		apply: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "fenced_raft_apply_duration_seconds", Help: "Time from submitting a command to the log until it is applied.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}),
		fsync: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "fenced_raft_log_write_duration_seconds", Help: "Time to write a batch of raft log entries, fsync included.",
			Buckets: prometheus.ExponentialBuckets(0.00005, 2, 16),
		}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fenced_limit_refusals_total", Help: "Requests, connections and streams refused or cut by a limit, by the flag that sets it.",
		}, []string{"limit"}),
		requests: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "fenced_request_duration_seconds",
			Help:    "Lease API request latency by method.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}, []string{"method"}),
	}
	for _, r := range []string{"granted", "held", "invalid", "error"} {
		m.acquisitions.WithLabelValues(r)
	}
	for _, r := range []string{"not_found", "invalid", "error"} {
		m.renewals.WithLabelValues(r)
		m.releases.WithLabelValues(r)
	}
	for _, l := range limitNames {
		m.refusals.WithLabelValues(l)
	}
	m.renewed = m.renewals.WithLabelValues("renewed")
	m.releases.WithLabelValues("released")
	counter := func(name, help string, n *atomic.Uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help},
			func() float64 { return float64(n.Load()) })
	}
	expirations := counter("fenced_expirations_total", "Leases expired by the leader.", &n.Counts.Expired)
	takeovers := counter("fenced_takeovers_total",
		"Grants of keys whose previous lease had expired rather than been released.", &n.Counts.Takeovers)
	tokens := counter("fenced_tokens_issued_total", "Fencing tokens issued (grants applied on this node).", &n.Counts.Acquired)
	leaderGauge := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "fenced_is_leader", Help: "1 while this node is the leader and serving acquisitions.",
	}, func() float64 {
		if n.Ready() {
			return 1
		}
		return 0
	})
	active := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "fenced_leases_active", Help: "Current leases.",
	}, func() float64 { return float64(n.Leases()) })
	leaseBytes := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "fenced_lease_bytes", Help: "What the current leases count against --max-lease-bytes: key, owner and a fixed overhead each.",
	}, func() float64 { return float64(n.LeaseBytes()) })
	waiters := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "fenced_waiters", Help: "Acquisitions waiting for a held key.",
	}, func() float64 { return float64(n.Waiters()) })
	callsInProgress := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "fenced_calls_in_progress", Help: "API calls being worked on, unary and carried by Session streams (at most --max-calls-in-progress).",
	}, func() float64 { n, _ := n.Calls(); return float64(n) })
	callsWaiting := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "fenced_calls_waiting", Help: "API calls waiting for their turn to be worked on, unary and carried by Session streams.",
	}, func() float64 { _, n := n.Calls(); return float64(n) })
	collectors := []prometheus.Collector{m.refusals, m.acquisitions, m.renewals, m.releases, expirations, takeovers,
		tokens, m.requests, m.apply, m.fsync, leaderGauge, active, leaseBytes, waiters, callsInProgress, callsWaiting}
	for _, c := range append(collectors, raftCollectors(n.Raft)...) {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// CountAcquisition counts an Acquire by its result, err (nil: granted),
// and a refusal by a limit among them.
func (m *Metrics) CountAcquisition(err error) {
	m.acquisitions.WithLabelValues(result(err, "granted")).Inc()
	m.countRefusal(err)
}

// CountRenewal counts a renewal by its result, err (nil: renewed).
func (m *Metrics) CountRenewal(err error) {
	if err == nil {
		m.renewed.Inc()
		return
	}
	m.renewals.WithLabelValues(result(err, "renewed")).Inc()
}

// CountRelease counts a Release by its result, err (nil: released).
func (m *Metrics) CountRelease(err error) {
	m.releases.WithLabelValues(result(err, "released")).Inc()
}

// ObserveRequest records the latency d of a lease API call of the method
// named (the last element of its procedure).
func (m *Metrics) ObserveRequest(method string, d time.Duration) {
	m.requests.WithLabelValues(method).Observe(d.Seconds())
}

// ObserveApply records the time d from submitting one of this node's
// writes to the log until it was applied.
func (m *Metrics) ObserveApply(d time.Duration) { m.apply.Observe(d.Seconds()) }

// ObserveLogWrite records the seconds of one raft log write, fsync
// included (raftlog.Timed's Observe).
func (m *Metrics) ObserveLogWrite(seconds float64) { m.fsync.Observe(seconds) }

// result is the label of an outcome err: ok when nil, else held,
// not_found, invalid or error.
func result(err error, ok string) string {
	var held *lease.HeldError
	switch {
	case err == nil:
		return ok
	case errors.As(err, &held):
		return "held"
	case errors.Is(err, lease.ErrNotHeld):
		return "not_found"
	case errors.Is(err, apierr.ErrInvalid):
		return "invalid"
	}
	return "error"
}

// raftCollectors exposes the node's raft position as gauges read at scrape
// time.
func raftCollectors(current func() *raft.Raft) []prometheus.Collector {
	gauge := func(name, help string, read func(r *raft.Raft) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 {
			r := current()
			if r == nil {
				return 0
			}
			return read(r)
		})
	}
	return []prometheus.Collector{
		gauge("fenced_raft_term", "Current raft term.", func(r *raft.Raft) float64 { return float64(r.CurrentTerm()) }),
		gauge("fenced_raft_commit_index", "Index of the last committed log entry known to this node.",
			func(r *raft.Raft) float64 { return float64(r.CommitIndex()) }),
		gauge("fenced_raft_applied_index", "Index of the last log entry applied to the lease state machine.",
			func(r *raft.Raft) float64 { return float64(r.AppliedIndex()) }),
	}
}
