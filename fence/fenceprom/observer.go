// Package fenceprom exports the decisions of fencing guards as Prometheus
// metrics. It is a package of its own so that programs that use the guards
// without Prometheus do not link its client library.
//
//	obs, err := fenceprom.NewObserver(prometheus.DefaultRegisterer, "orders-db")
//	guard, err := fencesql.New(db, fencesql.Config{Dialect: fencesql.Postgres, Observer: obs})
package fenceprom

import (
	"context"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencedio/fenced/fence"
)

// NewObserver returns a fence.Observer that counts decisions in
// fenced_guard_decisions_total{guard, result="accepted"|"rejected"|"duplicate"}
// (a duplicate, fence.ErrDuplicate, is a write already applied, not a stale
// token, and is counted apart) and
// records, for each rejection, how far the presented token was behind the
// highest one in the histogram fenced_guard_token_gap{guard}.
//
// guard names the guard, e.g. "memory" or "postgres"; it must come from a
// small fixed set, since every value is a time series. Scopes are never a
// label. The owner of a rejected mutation, when it came with one, is
// attached to the rejected counter as an exemplar (shown by the OpenMetrics
// exposition), not as a label, so that it costs no time series. Several guards may share reg under different names; asking twice
// for the same name returns an observer feeding the same series. A nil reg
// means prometheus.DefaultRegisterer.
func NewObserver(reg prometheus.Registerer, guard string) (fence.Observer, error) {
	if reg == nil {
		reg = prometheus.DefaultRegisterer
	}
	// guard is a constant label, so that each guard is a collector of its
	// own and several can be registered under one metric name.
	labels := prometheus.Labels{"guard": guard}
	decisions := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name:        "fenced_guard_decisions_total",
		Help:        "Mutations checked by a fencing guard, by result (accepted, rejected, or duplicate: already applied under its sequence).",
		ConstLabels: labels,
	}, []string{"result"})
	gap := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:        "fenced_guard_token_gap",
		Help:        "For rejected mutations, the highest accepted token minus the presented one.",
		ConstLabels: labels,
		Buckets:     prometheus.ExponentialBuckets(1, 4, 10), // 1 .. 262144
	})
	fresh, err := register(reg, &decisions)
	if err != nil {
		return nil, fmt.Errorf("fenceprom: register fenced_guard_decisions_total: %w", err)
	}
	if _, err := register(reg, &gap); err != nil {
		if fresh {
			reg.Unregister(decisions)
		}
		return nil, fmt.Errorf("fenceprom: register fenced_guard_token_gap: %w", err)
	}
	return &promObserver{
		// Resolved once: With on every decision would hash the label value.
		accepted:  decisions.WithLabelValues("accepted"),
		rejected:  decisions.WithLabelValues("rejected"),
		duplicate: decisions.WithLabelValues("duplicate"),
		gap:       gap,
	}, nil
}

// register registers *c and reports true, or replaces *c with the identical
// collector already registered and reports false.
func register[C prometheus.Collector](reg prometheus.Registerer, c *C) (bool, error) {
	err := reg.Register(*c)
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		existing, ok := are.ExistingCollector.(C)
		if !ok {
			return false, err
		}
		*c = existing
		return false, nil
	}
	return err == nil, err
}

type promObserver struct {
	accepted  prometheus.Counter
	rejected  prometheus.Counter
	duplicate prometheus.Counter
	gap       prometheus.Histogram
}

func (o *promObserver) Observe(_ context.Context, d fence.Decision) {
	if d.Accepted {
		o.accepted.Inc()
		return
	}
	if d.Duplicate {
		o.duplicate.Inc()
		return
	}
	IncWithOwner(o.rejected, d.Owner)
	if d.Highest > d.Presented {
		o.gap.Observe(float64(d.Highest - d.Presented))
	}
}

// IncWithOwner increments c, with owner as its exemplar when owner is not
// empty: the owner of a rejection is then visible in the OpenMetrics
// exposition without being a label (which would make a series per owner).
func IncWithOwner(c prometheus.Counter, owner string) {
	if e, ok := c.(prometheus.ExemplarAdder); ok && owner != "" {
		e.AddWithExemplar(1, prometheus.Labels{"owner": exemplarOwner(owner)})
		return
	}
	c.Inc()
}

// exemplarOwner cuts owner to what an exemplar can hold: at most
// prometheus.ExemplarMaxRunes runes for all its label names and values.
func exemplarOwner(owner string) string {
	room := prometheus.ExemplarMaxRunes - len("owner")
	if utf8.RuneCountInString(owner) <= room {
		return owner
	}
	return string([]rune(owner)[:room])
}

// Reporter is what RegisterReporter reads; *fencereport.Reporter satisfies
// it.
type Reporter interface {
	Resource() string
	Sent() uint64
	Dropped() uint64
	Pending() int
}

// RegisterReporter exports r as fenced_reporter_sent_total,
// fenced_reporter_dropped_total and fenced_reporter_queue_entries, each
// labelled with the resource r reports under. A nil reg means
// prometheus.DefaultRegisterer.
func RegisterReporter(reg prometheus.Registerer, r Reporter) error {
	if reg == nil {
		reg = prometheus.DefaultRegisterer
	}
	labels := prometheus.Labels{"resource": r.Resource()}
	for _, c := range []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "fenced_reporter_sent_total", ConstLabels: labels,
			Help: "Stale rejections fenced accepted from this reporter."}, func() float64 { return float64(r.Sent()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "fenced_reporter_dropped_total", ConstLabels: labels,
			Help: "Stale rejections this reporter did not deliver: queue full, or fenced did not accept the batch."},
			func() float64 { return float64(r.Dropped()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "fenced_reporter_queue_entries", ConstLabels: labels,
			Help: "Entries waiting to be sent."}, func() float64 { return float64(r.Pending()) }),
	} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("fenceprom: register reporter metrics: %w", err)
		}
	}
	return nil
}
