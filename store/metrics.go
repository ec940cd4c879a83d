package store

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Rejection reasons, the values of the reason label. Labels never carry a
// scope or an object name, so cardinality stays bounded.
const (
	reasonStale        = "stale"         // 409
	reasonMissingToken = "missing_token" // 428
	reasonMalformed    = "malformed"     // 400
	reasonTooLarge     = "too_large"     // 413
	reasonBadSignature = "bad_signature" // 403
	reasonDenied       = "denied"        // 401, 403 by Config.Authorize
	reasonNotFound     = "not_found"     // 404 on DELETE
	reasonBusy         = "busy"          // 503 by MaxInFlightBytes
	reasonDuplicate    = "duplicate"     // 409: applied before under its Fencing-Sequence
	reasonSequenceGap  = "sequence_gap"  // 409 by a strict store
)

type metrics struct {
	accepted      *prometheus.CounterVec // op
	rejected      *prometheus.CounterVec // op, reason
	staleAccepted prometheus.Counter
	tokenGap      prometheus.Histogram
	writeSeconds  prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		accepted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fenced_store_writes_accepted_total",
			Help: "Writes applied and made durable, by operation.",
		}, []string{"op"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fenced_store_writes_rejected_total",
			Help: "Writes refused with nothing applied, by operation and reason (stale, missing_token, malformed, too_large, bad_signature, denied, not_found, busy, duplicate, sequence_gap).",
		}, []string{"op", "reason"}),
		staleAccepted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fenced_store_stale_writes_accepted_total",
			Help: "Writes with a stale token that were applied because fencing is disabled (NoFencing). Always 0 on a fenced store.",
		}),
		tokenGap: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "fenced_store_stale_token_gap",
			Help:    "Highest accepted token minus presented token, for every stale write seen (rejected, or accepted under NoFencing).",
			Buckets: prometheus.ExponentialBuckets(1, 4, 11), // 1 .. ~1e6
		}),
		writeSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "fenced_store_write_duration_seconds",
			Help:    "Time to commit and fsync an accepted write.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16), // 100µs .. ~3s
		}),
	}
	for _, c := range []prometheus.Collector{m.accepted, m.rejected, m.staleAccepted, m.tokenGap, m.writeSeconds} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	// Make every series exist from the start, so that rate() and alerts see
	// zeros instead of absent series.
	for _, op := range []Op{OpPut, OpDelete} {
		m.accepted.WithLabelValues(string(op))
		for _, r := range []string{reasonStale, reasonMissingToken, reasonMalformed, reasonTooLarge} {
			m.rejected.WithLabelValues(string(op), r)
		}
	}
	m.rejected.WithLabelValues(string(OpDelete), reasonNotFound)
	m.rejected.WithLabelValues(string(OpPut), reasonBusy)
	return m, nil
}
