package server

import (
	"github.com/fencedio/fenced/lease"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the server's Prometheus collectors. No label carries a key.
type metrics struct {
	acquisitions *prometheus.CounterVec // result: granted, held, invalid, error
	renewals     *prometheus.CounterVec // result: renewed, not_found, invalid, error
	releases     *prometheus.CounterVec // result: released, not_found, invalid, error
	expirations  prometheus.Counter
	tokens       prometheus.Counter
	requests     *prometheus.HistogramVec // method
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
		expirations: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fenced_expirations_total", Help: "Leases expired by the leader.",
		}),
		tokens: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fenced_tokens_issued_total", Help: "Fencing tokens issued (grants applied on this node).",
		}),
		requests: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "fenced_request_duration_seconds",
			Help:    "Lease API request latency by method.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}, []string{"method"}),
	}
	for _, r := range []string{"granted", "held", "invalid", "error"} {
		m.acquisitions.WithLabelValues(r)
	}
	for _, r := range []string{"renewed", "not_found", "invalid", "error"} {
		m.renewals.WithLabelValues(r)
		m.releases.WithLabelValues(r)
	}
	leaderGauge := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "fenced_is_leader", Help: "1 while this node is the leader and serving acquisitions.",
	}, func() float64 {
		if s.ready.Load() {
			return 1
		}
		return 0
	})
	active := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "fenced_leases_active", Help: "Current leases.",
	}, func() float64 {
		var n int
		s.fsm.read(func(st *lease.State) { n = st.Len() })
		return float64(n)
	})
	waiters := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "fenced_waiters", Help: "Acquisitions waiting for a held key.",
	}, func() float64 { return float64(s.waiters.len()) })
	for _, c := range []prometheus.Collector{m.acquisitions, m.renewals, m.releases, m.expirations, m.tokens, m.requests, leaderGauge, active, waiters} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
