package fence

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// NewSlogObserver returns an Observer that logs accepted tokens at Debug and
// rejected ones at Warn, with the attributes scope, presented_token and
// highest_token, plus rejections on rejections: how many this observer has
// seen since it was created. A nil logger means slog.Default(). To tell
// guards apart, pass a logger with an attribute of your own, e.g.
// logger.With("guard", "orders-db").
func NewSlogObserver(logger *slog.Logger) Observer {
	if logger == nil {
		logger = slog.Default()
	}
	return &slogObserver{logger: logger}
}

type slogObserver struct {
	logger     *slog.Logger
	rejections atomic.Uint64
}

func (o *slogObserver) Observe(ctx context.Context, d Decision) {
	if d.Accepted {
		o.logger.LogAttrs(ctx, slog.LevelDebug, "fencing token accepted",
			slog.String("scope", d.Scope),
			slog.Uint64("presented_token", d.Presented),
			slog.Uint64("highest_token", d.Highest))
		return
	}
	n := o.rejections.Add(1)
	o.logger.LogAttrs(ctx, slog.LevelWarn, "stale fencing token rejected",
		slog.String("scope", d.Scope),
		slog.Uint64("presented_token", d.Presented),
		slog.Uint64("highest_token", d.Highest),
		slog.Uint64("rejections", n))
}

// NewPrometheusObserver returns an Observer that counts decisions in
// fenced_guard_decisions_total{guard, result="accepted"|"rejected"} and
// records, for each rejection, how far the presented token was behind the
// highest one in the histogram fenced_guard_token_gap{guard}.
//
// guard names the guard, e.g. "memory" or "postgres"; it must come from a
// small fixed set, since every value is a time series. Scopes are never a
// label. Several guards may share reg under different names; asking twice
// for the same name returns an observer feeding the same series. A nil reg
// means prometheus.DefaultRegisterer.
func NewPrometheusObserver(reg prometheus.Registerer, guard string) (Observer, error) {
	if reg == nil {
		reg = prometheus.DefaultRegisterer
	}
	// guard is a constant label, so that each guard is a collector of its
	// own and several can be registered under one metric name.
	labels := prometheus.Labels{"guard": guard}
	decisions := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name:        "fenced_guard_decisions_total",
		Help:        "Mutations checked by a fencing guard, by result (accepted or rejected).",
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
		return nil, fmt.Errorf("fence: register fenced_guard_decisions_total: %w", err)
	}
	if _, err := register(reg, &gap); err != nil {
		if fresh {
			reg.Unregister(decisions)
		}
		return nil, fmt.Errorf("fence: register fenced_guard_token_gap: %w", err)
	}
	return &promObserver{
		// Resolved once: With on every decision would hash the label value.
		accepted: decisions.WithLabelValues("accepted"),
		rejected: decisions.WithLabelValues("rejected"),
		gap:      gap,
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
	accepted prometheus.Counter
	rejected prometheus.Counter
	gap      prometheus.Histogram
}

func (o *promObserver) Observe(_ context.Context, d Decision) {
	if d.Accepted {
		o.accepted.Inc()
		return
	}
	o.rejected.Inc()
	if d.Highest > d.Presented {
		o.gap.Observe(float64(d.Highest - d.Presented))
	}
}
