// Package httplimit puts limits on everything an HTTP client can make a
// server hold: header bytes, idle connections, slow request bodies, open
// connections and the size a streamed message claims. fenced's lease API
// and the reference store use it alike.
//
// Guarantees:
//   - Request headers above MaxHeaderBytes are refused with 431 (HTTP/1.1);
//     over HTTP/2 the same bound is advertised as SETTINGS_MAX_HEADER_LIST_SIZE
//     and larger header lists are refused.
//   - A keep-alive connection with no request for IdleTimeout is closed.
//   - A request body that is not fully received within BodyTimeout of the
//     request's start fails the read; streaming calls are exempt (their
//     sends are bounded by the server's per-send write deadline instead).
//   - At most MaxConns connections are open at once; further connections
//     wait in the kernel's accept queue until one closes.
//   - A gRPC or Connect-streaming message whose length prefix exceeds
//     MaxMessageBytes fails the read right after its 5-byte prefix, before
//     any of its payload is read.
//
// Non-guarantees: MaxConns does not count connections per client, so one
// client can take every slot; front the server with a proxy for that.
package httplimit

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Limits are an HTTP server's limits. Zero fields take the defaults below
// (WithDefaults).
type Limits struct {
	// MaxHeaderBytes bounds request headers (and the HTTP/2 header list).
	// Default 64 KiB.
	MaxHeaderBytes int
	// ReadHeaderTimeout bounds the time to receive request headers.
	// Default 10s.
	ReadHeaderTimeout time.Duration
	// IdleTimeout closes keep-alive connections idle this long.
	// Default 2m.
	IdleTimeout time.Duration
	// BodyTimeout bounds the time to receive a non-streaming request body.
	// Default 30s.
	BodyTimeout time.Duration
	// MaxConns caps open connections. Default: three quarters of the
	// process's file descriptor limit (RLIMIT_NOFILE), at least 64, so that
	// files, raft peers and the log keep descriptors to spare.
	MaxConns int
}

// WithDefaults returns l with each zero field set to its default.
func (l Limits) WithDefaults() Limits {
	def := func(p *time.Duration, d time.Duration) {
		if *p == 0 {
			*p = d
		}
	}
	if l.MaxHeaderBytes == 0 {
		l.MaxHeaderBytes = 64 << 10
	}
	def(&l.ReadHeaderTimeout, 10*time.Second)
	def(&l.IdleTimeout, 2*time.Minute)
	def(&l.BodyTimeout, 30*time.Second)
	if l.MaxConns == 0 {
		l.MaxConns = DefaultMaxConns()
	}
	return l
}

// Validate checks the limits; zero fields stand for their defaults. It
// does not change l.
func (l Limits) Validate() error {
	if l.MaxHeaderBytes < 0 || l.ReadHeaderTimeout < 0 || l.IdleTimeout < 0 || l.BodyTimeout < 0 || l.MaxConns < 0 {
		return errors.New("http limits: negative value")
	}
	return nil
}

// DefaultMaxConns is three quarters of RLIMIT_NOFILE, at least 64.
func DefaultMaxConns() int {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil || r.Cur == 0 {
		return 1024
	}
	return int(max(64, min(r.Cur, 1<<30)*3/4))
}

// Server returns an http.Server for h with the limits applied (call
// WithDefaults first). Serve it on Listener(ln, l.MaxConns).
func (l Limits) Server(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		MaxHeaderBytes:    l.MaxHeaderBytes,
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		IdleTimeout:       l.IdleTimeout,
	}
}

// Listener returns ln limited to max open connections: Accept waits while
// max accepted connections are still open.
func Listener(ln net.Listener, max int) net.Listener {
	return &limitListener{Listener: ln, sem: make(chan struct{}, max), done: make(chan struct{})}
}

type limitListener struct {
	net.Listener
	sem       chan struct{}
	closeOnce sync.Once
	done      chan struct{}
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.sem }}, nil
}

func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// BodyDeadline sets a read deadline of timeout on the body of every request
// for which stream returns false, and clears it once the body has been read
// to its end, so that a handler that then waits (an acquisition waiting in
// line) is not cut. stream may be nil: no request is a stream.
func BodyDeadline(next http.Handler, timeout time.Duration, stream func(*http.Request) bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if timeout <= 0 || r.Body == nil || r.Body == http.NoBody || (stream != nil && stream(r)) {
			next.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		if rc.SetReadDeadline(time.Now().Add(timeout)) == nil {
			r.Body = &deadlineBody{ReadCloser: r.Body, clear: func() { rc.SetReadDeadline(time.Time{}) }}
		}
		next.ServeHTTP(w, r)
	})
}

type deadlineBody struct {
	io.ReadCloser
	once  sync.Once
	clear func()
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) {
		b.once.Do(b.clear)
	}
	return n, err
}

// ErrMessageTooLarge fails the read of a streamed message whose length
// prefix exceeds the limit.
var ErrMessageTooLarge = errors.New("message length exceeds the limit")

// EnvelopeLimit makes the body of every gRPC and Connect-streaming request
// (content types application/grpc* and application/connect+*) fail with
// ErrMessageTooLarge as soon as a message's 5-byte length prefix claims more
// than max bytes, so that the payload is never read. Other requests pass
// unchanged.
func EnvelopeLimit(next http.Handler, max int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ct := r.Header.Get("Content-Type")
		if r.Body != nil && (strings.HasPrefix(ct, "application/grpc") || strings.HasPrefix(ct, "application/connect+")) {
			r.Body = &envelopeBody{ReadCloser: r.Body, max: max}
		}
		next.ServeHTTP(w, r)
	})
}

// envelopeBody follows the 5-byte prefixes (flags, big-endian length) of
// the messages in a body as they are read.
type envelopeBody struct {
	io.ReadCloser
	max     int64
	prefix  [5]byte
	have    int   // bytes of the current prefix read
	payload int64 // bytes of the current payload still to come
	err     error
}

func (b *envelopeBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	// Never read past the current prefix, so a bad length is caught before
	// any of its payload is read.
	if b.payload == 0 && len(p) > 5-b.have {
		p = p[:5-b.have]
	} else if b.payload > 0 && int64(len(p)) > b.payload {
		p = p[:b.payload]
	}
	n, err := b.ReadCloser.Read(p)
	for i := 0; i < n; {
		if b.payload > 0 {
			step := min(int64(n-i), b.payload)
			b.payload -= step
			i += int(step)
			continue
		}
		b.prefix[b.have] = p[i]
		b.have++
		i++
		if b.have == 5 {
			b.have = 0
			b.payload = int64(binary.BigEndian.Uint32(b.prefix[1:]))
			if b.payload > b.max {
				b.err = fmt.Errorf("%w: a message claims %d bytes, the limit is %d", ErrMessageTooLarge, b.payload, b.max)
				return n, err
			}
		}
	}
	return n, err
}
