package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"
)

// errTooManyStreams refuses a Watch or dashboard subscription beyond a
// limit; it maps to resource_exhausted (HTTP 429 on /v1/events).
var errTooManyStreams = errors.New("too many streams")

// streamLimiter caps open streams of one kind, in total and per client IP.
type streamLimiter struct {
	kind           string // "watchers", "event subscribers": named in errors
	max, perClient int

	mu    sync.Mutex
	total int
	byIP  map[string]int
}

func newStreamLimiter(kind string, max, perClient int) *streamLimiter {
	return &streamLimiter{kind: kind, max: max, perClient: perClient, byIP: make(map[string]int)}
}

// acquire takes a slot for a stream from ip, or says which limit is full.
// The returned func gives the slot back.
func (l *streamLimiter) acquire(ip string) (func(), error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.total >= l.max {
		return nil, fmt.Errorf("%w: %d %s open on this server (limit %d)", errTooManyStreams, l.total, l.kind, l.max)
	}
	if l.byIP[ip] >= l.perClient {
		return nil, fmt.Errorf("%w: %d %s open from %s (limit %d per client)", errTooManyStreams, l.byIP[ip], l.kind, ip, l.perClient)
	}
	l.total++
	l.byIP[ip]++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.total--
			if l.byIP[ip]--; l.byIP[ip] <= 0 {
				delete(l.byIP, ip)
			}
		})
	}, nil
}

// clientIP is the host part of a remote address; the address itself when it
// has no port.
func clientIP(addr string) string {
	if host, _, err := net.SplitHostPort(addr); err == nil {
		return host
	}
	return addr
}

type responseControllerKey struct{}

// withResponseController gives handlers below it (connect's stream handlers
// cannot reach the ResponseWriter) the request's ResponseController, for
// per-send write deadlines.
func withResponseController(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := context.WithValue(r.Context(), responseControllerKey{}, http.NewResponseController(w))
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// writeDeadlineFrom returns a func that sets the write deadline of ctx's
// response to timeout from now; call it before every send of a stream. It
// does nothing when ctx has no ResponseController or timeout is 0.
func writeDeadlineFrom(ctx context.Context, timeout time.Duration) func() {
	rc, _ := ctx.Value(responseControllerKey{}).(*http.ResponseController)
	if rc == nil || timeout <= 0 {
		return func() {}
	}
	return func() { rc.SetWriteDeadline(time.Now().Add(timeout)) }
}
