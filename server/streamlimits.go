package server

import (
	"context"
	"net/http"
	"time"
)

type streamControlKey struct{}

// streamControl lets a stream handler below connect (which cannot reach
// the ResponseWriter) set per-send write deadlines and hold back flushes.
type streamControl struct {
	rc *http.ResponseController
	w  *batchingWriter
	// deadline is the write deadline last set; zero when none is.
	deadline time.Time
}

// batchingWriter skips Flush while hold is set. connect flushes after every
// message of a stream; a Watch handler sending a batch of queued events
// holds the flushes of all but the last, so the batch leaves in a few large
// writes instead of one system call per event.
type batchingWriter struct {
	http.ResponseWriter
	hold bool // only the handler's goroutine touches it
}

func (b *batchingWriter) Flush() {
	if !b.hold {
		http.NewResponseController(b.ResponseWriter).Flush()
	}
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (b *batchingWriter) Unwrap() http.ResponseWriter { return b.ResponseWriter }

// withStreamControl gives stream handlers a streamControl through their
// context. Unary calls pass through untouched.
func withStreamControl(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !isStreamProcedure(r) {
			next.ServeHTTP(w, r)
			return
		}
		bw := &batchingWriter{ResponseWriter: w}
		ctl := &streamControl{rc: http.NewResponseController(w), w: bw}
		next.ServeHTTP(bw, r.WithContext(context.WithValue(r.Context(), streamControlKey{}, ctl)))
	})
}

// streamControlFrom returns ctx's streamControl, or nil.
func streamControlFrom(ctx context.Context) *streamControl {
	ctl, _ := ctx.Value(streamControlKey{}).(*streamControl)
	return ctl
}

// beforeSend makes sure the write deadline leaves at least 3/4 of timeout
// for the send (none when timeout is 0), and holds the flush after it when
// more follows.
func (c *streamControl) beforeSend(timeout time.Duration, more bool) {
	if c == nil {
		return
	}
	c.armDeadline(timeout)
	c.w.hold = more
}

// armDeadline moves the write deadline to timeout from now when less than
// 3/4 of timeout is left. Moving it only then matters: over HTTP/2 every
// move is a round trip to the connection's goroutine and a timer reset,
// which cost more than the send of an event itself when thousands of
// watchers each receive every event.
func (c *streamControl) armDeadline(timeout time.Duration) {
	if timeout <= 0 {
		return
	}
	if now := time.Now(); c.deadline.Sub(now) < timeout-timeout/4 {
		c.deadline = now.Add(timeout)
		c.rc.SetWriteDeadline(c.deadline)
	}
}

// writeFlush writes p, whole stream envelopes, below connect, then flushes.
// Only for a stream whose headers connect has sent (after its first
// message): connect keeps no state between messages of a server stream
// that these writes would bypass.
func (c *streamControl) writeFlush(timeout time.Duration, p []byte) error {
	c.armDeadline(timeout)
	if _, err := c.w.ResponseWriter.Write(p); err != nil {
		return err
	}
	return c.rc.Flush()
}
