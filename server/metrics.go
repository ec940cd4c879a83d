package server

import (
	"errors"
	"sync/atomic"

	"github.com/fencedio/fenced/lease"
	"github.com/fencedio/fenced/server/internal/apierr"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
)

// transitions counts the transitions applied since this process started,
// replays of the log at start-up excluded. They are the one count of
// transitions: /v1/stats reads them, and so do the Prometheus counters
// (counterFunc).
type transitions struct {
	acquired, released, expired, takeovers atomic.Uint64
}

// metrics are the server's Prometheus collectors. No label carries a key.
type metrics struct {
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
var limitNames = []string{"max-leases", "max-leases-per-owner", "max-leases-per-client", "max-waiters",
	"max-waiters-per-owner", "max-waiters-per-client", "max-calls-per-client", "max-conns-per-client", "max-watchers",
	"max-watchers-per-client", "max-event-subscribers", "max-event-subscribers-per-client"}

// refused counts a refusal by the limit named (one of limitNames).
func (m *metrics) refused(limit string) { m.refusals.WithLabelValues(limit).Inc() }

// countRefusal counts err if a limit refused it.
func (m *metrics) countRefusal(err error) {
	var q *apierr.QuotaError
	switch {
	case err == nil:
	case errors.As(err, &q):
		m.refused(q.Quota)
	case errors.Is(err, apierr.ErrTooManyLeases):
		m.refused("max-leases")
	case errors.Is(err, apierr.ErrTooManyWaiters):
		m.refused("max-waiters")
	}
}

func newMetrics(reg prometheus.Registerer, s *Server) (*metrics, error) {
	m := &metrics{
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
			Name: "fenced_limit_refusals_total", Help: "Requests and connections refused by a limit, by the flag that sets it.",
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
	expirations := counter("fenced_expirations_total", "Leases expired by the leader.", &s.counts.expired)
	takeovers := counter("fenced_takeovers_total",
		"Grants of keys whose previous lease had expired rather than been released.", &s.counts.takeovers)
	tokens := counter("fenced_tokens_issued_total", "Fencing tokens issued (grants applied on this node).", &s.counts.acquired)
	leaderGauge := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "fenced_is_leader", Help: "1 while this node is the leader and serving acquisitions.",
	}, func() float64 {
		if s.Ready() {
			return 1
		}
		return 0
	})
	active := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "fenced_leases_active", Help: "Current leases.",
	}, func() float64 {
		var n int
		s.fsm.Read(func(st *lease.State) { n = st.Len() })
		return float64(n)
	})
	waiters := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "fenced_waiters", Help: "Acquisitions waiting for a held key.",
	}, func() float64 { return float64(s.waiters.Len()) })
	collectors := []prometheus.Collector{m.refusals, m.acquisitions, m.renewals, m.releases, expirations, takeovers,
		tokens, m.requests, m.apply, m.fsync, leaderGauge, active, waiters}
	for _, c := range append(collectors, raftCollectors(s)...) {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) countRenewal(err error) {
	if err == nil {
		m.renewed.Inc()
		return
	}
	m.renewals.WithLabelValues(result(err, "renewed")).Inc()
}

// raftCollectors exposes the node's raft position as gauges read at scrape
// time.
func raftCollectors(s *Server) []prometheus.Collector {
	gauge := func(name, help string, read func(r *raft.Raft) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 {
			if s.raft == nil {
				return 0
			}
			return read(s.raft)
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
