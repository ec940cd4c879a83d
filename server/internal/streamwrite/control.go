package streamwrite

import (
	"context"
	"net/http"
	"sync"
	"time"
)

type controlKey struct{}

// Control is one stream's control of its writes.
type Control struct {
	rc *http.ResponseController
	w  *batchingWriter
	// deadline is the write deadline last set; zero when none is.
	deadline time.Time
	// bound makes the stream's Unacked on its first Send, so that a
	// stream that never calls it (KeepAlive) leaves its connection's send
	// buffer alone.
	bound func() *Unacked
}

// batchingWriter skips Flush while hold is set. connect flushes after every
// message of a stream; a handler sending a batch of queued messages holds
// the flushes of all but the last, so the batch leaves in a few large
// writes instead of one system call per message.
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

// Wrap gives the requests for which stream reports true a Control through
// their context, bounded to maxUnacked bytes unacknowledged (NewUnacked,
// which calls exceeded). Other requests pass through untouched.
func Wrap(next http.Handler, stream func(*http.Request) bool, maxUnacked int, exceeded func()) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !stream(r) {
			next.ServeHTTP(w, r)
			return
		}
		bw := &batchingWriter{ResponseWriter: w}
		ctl := &Control{rc: http.NewResponseController(w), w: bw}
		ctl.bound = sync.OnceValue(func() *Unacked { return NewUnacked(r.Context(), maxUnacked, exceeded) })
		next.ServeHTTP(bw, r.WithContext(context.WithValue(r.Context(), controlKey{}, ctl)))
	})
}

// From returns ctx's Control, or nil.
func From(ctx context.Context) *Control {
	ctl, _ := ctx.Value(controlKey{}).(*Control)
	return ctl
}

// BeforeSend makes sure the write deadline leaves at least 3/4 of timeout
// for the send (none when timeout is 0), and holds the flush after it when
// more follows.
func (c *Control) BeforeSend(timeout time.Duration, more bool) {
	if c == nil {
		return
	}
	c.armDeadline(timeout)
	c.w.hold = more
}

// MaxWrite is the most bytes one write within Send may add
// (Unacked.MaxWrite); 0: no limit.
func (c *Control) MaxWrite() int {
	if c == nil {
		return 0
	}
	return c.bound().MaxWrite()
}

// Send calls write within the stream's bound on unacknowledged bytes
// (Unacked.Send): past it, it returns ErrBehind. On a nil Control it
// just calls write.
func (c *Control) Send(write func() error) error {
	if c == nil {
		return write()
	}
	return c.bound().Send(write)
}

// armDeadline moves the write deadline to timeout from now when less than
// 3/4 of timeout is left. Moving it only then matters: over HTTP/2 every
// move is a round trip to the connection's goroutine and a timer reset,
// which cost more than the send of an event itself when thousands of
// watchers each receive every event.
func (c *Control) armDeadline(timeout time.Duration) {
	if timeout <= 0 {
		return
	}
	if now := time.Now(); c.deadline.Sub(now) < timeout-timeout/4 {
		c.deadline = now.Add(timeout)
		c.rc.SetWriteDeadline(c.deadline)
	}
}

// WriteFlush writes p, whole stream envelopes, below connect, then
// flushes. Only for a stream whose headers connect has sent (after its
// first message): connect keeps no state between messages of a server
// stream that these writes would bypass.
func (c *Control) WriteFlush(timeout time.Duration, p []byte) error {
	c.armDeadline(timeout)
	if _, err := c.w.ResponseWriter.Write(p); err != nil {
		return err
	}
	return c.rc.Flush()
}

// EndReads makes the request body's reads, the one waiting included,
// return at once: net/http forbids reading the body once the handler has
// returned, so a handler that ends early stops its reader first.
func (c *Control) EndReads() {
	if c != nil {
		_ = c.rc.SetReadDeadline(time.Now())
	}
}
