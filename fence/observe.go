package fence

import (
	"context"
	"log/slog"
	"sync/atomic"
)

// NewSlogObserver returns an Observer that logs accepted tokens at Debug and
// rejected ones at Warn, with the attributes scope, presented_token and
// highest_token, owner when the decision has one, plus rejections on
// rejections: how many this observer has seen since it was created, and
// sequence when the write carried one. Duplicates (ErrDuplicate) are logged
// at Info and are not rejections. A nil logger means slog.Default(). To tell
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
	attrs := make([]slog.Attr, 0, 6)
	attrs = append(attrs,
		slog.String("scope", d.Scope),
		slog.Uint64("presented_token", d.Presented),
		slog.Uint64("highest_token", d.Highest))
	if d.Owner != "" {
		attrs = append(attrs, slog.String("owner", d.Owner))
	}
	if d.Sequence != 0 {
		attrs = append(attrs, slog.Uint64("sequence", d.Sequence))
	}
	if d.Duplicate {
		o.logger.LogAttrs(ctx, slog.LevelInfo, "duplicate write not applied again", attrs...)
		return
	}
	if d.Accepted {
		o.logger.LogAttrs(ctx, slog.LevelDebug, "fencing token accepted", attrs...)
		return
	}
	attrs = append(attrs, slog.Uint64("rejections", o.rejections.Add(1)))
	o.logger.LogAttrs(ctx, slog.LevelWarn, "stale fencing token rejected", attrs...)
}
