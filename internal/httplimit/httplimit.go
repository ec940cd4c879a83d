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
//     request's start fails the read, however steadily its bytes trickle
//     in (the deadline is the body's, not each read's), and so does the
//     read of the rest of a body that net/http makes after an answer given
//     before the body was read; streaming calls are exempt (their sends
//     are bounded by the server's per-send write deadline instead).
//   - At most MaxConns connections are open at once; further connections
//     wait in the kernel's accept queue until one closes. At most
//     MaxConnsPerClient of them come from one IP address, and at most
//     so many from one network when networks are counted: a connection beyond
//     either is closed as soon as it is accepted, so that one client
//     cannot keep the others waiting.
//   - A gRPC or Connect-streaming message whose length prefix exceeds
//     MaxMessageBytes fails the read right after its 5-byte prefix, before
//     any of its payload is read.
//   - Over HTTP/1.x, an answer given after a request body failed to read
//     (a deadline, an oversized message, a broken chunk) closes the
//     connection (Connection: close): whatever the client sends next cannot
//     be told apart from the rest of that body.
//   - Shutdown of a Server that registered its Listener's CloseSilent
//     (RegisterOnShutdown) closes at once every connection on which the
//     client has sent nothing yet: net/http alone counts such a connection
//     (a client's spare, never used) as a request about to start and waits
//     up to 5 seconds for it. Requests already sent get their answers.
//
// Non-guarantees: clients are told apart by the connection's remote IP
// address only, never by a forwarded header; every client behind one NAT
// or proxy shares one MaxConnsPerClient. A refused connection gets no
// answer, only its close: no HTTP has been spoken on it yet. A request a
// client sends on a fresh connection at the very moment Shutdown closes it
// gets no answer, as with any server that goes away.
package httplimit

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
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
	// Default 60s: below the 75s of nginx, above the 5s of Apache httpd,
	// so that a client's pooled connections outlive short pauses without
	// one idle client holding its slots for minutes.
	IdleTimeout time.Duration
	// BodyTimeout bounds the time to receive a non-streaming request body.
	// Default 30s.
	BodyTimeout time.Duration
	// MaxConns caps open connections. Default: three quarters of the
	// process's file descriptor limit (RLIMIT_NOFILE), at least 64, so that
	// files, raft peers and the log keep descriptors to spare.
	MaxConns int
	// MaxConnsPerClient caps the open connections from one IP address.
	// Default a tenth of MaxConns, at least 64 (at most MaxConns).
	MaxConnsPerClient int
}

// WithDefaults returns l with each zero field set to its default.
func (l Limits) WithDefaults() Limits {
	def := func(p *time.Duration, d time.Duration) {
		if *p == 0 {
			*p = d
		}
	}
	if l.MaxHeaderBytes == 0 {
		l.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	def(&l.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	def(&l.IdleTimeout, DefaultIdleTimeout)
	def(&l.BodyTimeout, DefaultBodyTimeout)
	if l.MaxConns == 0 {
		l.MaxConns = DefaultMaxConns()
	}
	if l.MaxConnsPerClient == 0 {
		l.MaxConnsPerClient = min(l.MaxConns, max(64, l.MaxConns/10))
	}
	return l
}

// Validate checks the limits; zero fields stand for their defaults. It
// does not change l.
func (l Limits) Validate() error {
	if l.MaxHeaderBytes < 0 || l.ReadHeaderTimeout < 0 || l.IdleTimeout < 0 || l.BodyTimeout < 0 || l.MaxConns < 0 || l.MaxConnsPerClient < 0 {
		return errors.New("http limits: negative value")
	}
	return nil
}

// The defaults of Limits' fields that do not depend on the machine.
const (
	DefaultMaxHeaderBytes    = 64 << 10
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultIdleTimeout       = 60 * time.Second
	DefaultBodyTimeout       = 30 * time.Second
)

// DefaultMaxConns is three quarters of RLIMIT_NOFILE, at least 64.
func DefaultMaxConns() int {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil || r.Cur == 0 {
		return 1024
	}
	return int(max(64, min(r.Cur, 1<<30)*3/4))
}

// Server returns an http.Server for h with the limits applied (call
// WithDefaults first). Serve it on l.Listener, with that listener's
// CloseSilent registered by RegisterOnShutdown.
func (l Limits) Server(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           CloseOnBodyError(h),
		MaxHeaderBytes:    l.MaxHeaderBytes,
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		IdleTimeout:       l.IdleTimeout,
	}
}

// Listener returns ln limited to MaxConns open connections, at most
// MaxConnsPerClient of them from one IP address (call WithDefaults first),
// and at most perNetwork from one network when network, which names an
// address's network, is set. Accept waits while MaxConns accepted
// connections are still open; a connection from an address or a network
// that already has its limit open is closed at once and handed to refused
// (which may be nil) with the network's name when the network's limit
// refused it ("" for the address's), not returned.
func (l Limits) Listener(ln net.Listener, network func(ip string) string, perNetwork int, refused func(c net.Conn, network string)) *Listener {
	return &Listener{Listener: ln, sem: make(chan struct{}, max(1, l.MaxConns)), perClient: l.MaxConnsPerClient,
		network: network, perNetwork: perNetwork,
		byIP: make(map[string]int), open: make(map[*limitConn]struct{}), refused: refused, done: make(chan struct{})}
}

// Listener is a net.Listener with the connection limits of Limits.
type Listener struct {
	net.Listener
	sem        chan struct{}
	perClient  int
	network    func(ip string) string
	perNetwork int
	refused    func(net.Conn, string)
	closeOnce  sync.Once
	done       chan struct{}

	mu   sync.Mutex
	byIP map[string]int // by address and by network: a network's name has a '/', an address none
	open map[*limitConn]struct{}
}

func (l *Listener) Accept() (net.Conn, error) {
	for {
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
		lc := &limitConn{Conn: c, ip: remoteIP(c), l: l}
		if l.network != nil {
			if lc.network = l.network(lc.ip); lc.network == lc.ip {
				lc.network = "" // not an IP address: the address is all there is
			}
		}
		if ok, network := l.take(lc); !ok {
			c.Close()
			<-l.sem
			if l.refused != nil {
				l.refused(c, network)
			}
			continue
		}
		return lc, nil
	}
}

// take counts c, unless its IP address has perClient open or its network
// perNetwork (then named).
func (l *Listener) take(c *limitConn) (bool, string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.perClient > 0 && l.byIP[c.ip] >= l.perClient {
		return false, ""
	}
	if c.network != "" && l.perNetwork > 0 && l.byIP[c.network] >= l.perNetwork {
		return false, c.network
	}
	l.byIP[c.ip]++
	if c.network != "" {
		l.byIP[c.network]++
	}
	l.open[c] = struct{}{}
	return true, ""
}

func (l *Listener) give(c *limitConn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.open, c)
	for _, k := range [...]string{c.ip, c.network} {
		if k != "" {
			if l.byIP[k]--; l.byIP[k] <= 0 {
				delete(l.byIP, k)
			}
		}
	}
	<-l.sem
}

// CloseSilent closes every open connection on which no byte has been
// received. A request sent at that very moment gets no answer.
func (l *Listener) CloseSilent() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for c := range l.open {
		if !c.heard.Load() {
			c.Conn.Close() // the server's Read fails, and it closes c
		}
	}
}

// remoteIP is the IP address of c's peer, or its whole address when that
// has no port.
func remoteIP(c net.Conn) string {
	addr := c.RemoteAddr().String()
	if host, _, err := net.SplitHostPort(addr); err == nil {
		return host
	}
	return addr
}

func (l *Listener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

type limitConn struct {
	net.Conn
	ip      string
	network string // "" when not counted by network
	l       *Listener
	heard   atomic.Bool // a byte has been received
	once    sync.Once
}

func (c *limitConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && !c.heard.Load() {
		c.heard.Store(true)
	}
	return n, err
}

// NetConn returns the connection under the limits.
func (c *limitConn) NetConn() net.Conn { return c.Conn }

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.give(c) })
	return err
}

// CloseOnBodyError makes an HTTP/1.x answer close its connection
// (Connection: close) when it is written after a read of the request body
// failed with anything but EOF: a read deadline, an oversized streamed
// message, a broken chunk. net/http would otherwise try to read the rest
// of the body before the next request, and with a silent client (a chunked
// body, or one whose remaining length is small) wait for it until the
// client leaves. HTTP/2 requests pass unchanged: their streams end alone.
// Server applies it.
func CloseOnBodyError(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != 1 || r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		// One allocation for the whole watch: the state, the body and the
		// writer point into it.
		st := &bodyState{w: w}
		st.body = watchedBody{ReadCloser: r.Body, st: st}
		st.cw = closingWriter{ResponseWriter: w, failed: &st.failed}
		if enveloped(r) {
			// Only EnvelopeLimit, which acts on these alone, reports
			// through the context; other requests keep theirs.
			r = r.WithContext(context.WithValue(r.Context(), bodyStateKey{}, st))
		}
		r.Body = &st.body
		next.ServeHTTP(&st.cw, r)
		if st.failed.Load() {
			st.cw.send()
		}
	})
}

// bodyState is what CloseOnBodyError knows of a request's body. For
// enveloped requests it rides in the request's context, so that readers
// above the body (EnvelopeLimit) can report a failure of their own.
type bodyState struct {
	failed atomic.Bool
	w      http.ResponseWriter // the connection's, for its read deadline
	body   watchedBody
	cw     closingWriter
}

type bodyStateKey struct{}

// fail notes that the body failed. net/http reads what is left of a body
// when it is closed, and again once the handler returns, to reuse the
// connection; the client may never send it, so reads end now.
func (st *bodyState) fail() {
	if !st.failed.Swap(true) {
		_ = http.NewResponseController(st.w).SetReadDeadline(time.Now())
	}
}

// bodyFailed reports a failure of r's body to CloseOnBodyError, if r went
// through it.
func bodyFailed(r *http.Request) {
	if st, ok := r.Context().Value(bodyStateKey{}).(*bodyState); ok {
		st.fail()
	}
}

// watchedBody notes a failed read. Reads may come from any goroutine.
type watchedBody struct {
	io.ReadCloser
	st *bodyState
}

func (b *watchedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		b.st.fail()
	}
	return n, err
}

// closingWriter adds Connection: close to the answer's header when it is
// sent after the body failed.
type closingWriter struct {
	http.ResponseWriter
	failed *atomic.Bool
	sent   bool
}

func (w *closingWriter) send() {
	if !w.sent {
		w.sent = true
		if w.failed.Load() {
			w.Header().Set("Connection", "close")
		}
	}
}

func (w *closingWriter) WriteHeader(code int) {
	if code >= 200 {
		w.send()
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *closingWriter) Write(p []byte) (int, error) {
	w.send()
	return w.ResponseWriter.Write(p)
}

// Flush keeps streaming answers working (connect-go needs http.Flusher).
func (w *closingWriter) Flush() {
	w.send()
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *closingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// BodyDeadline sets a read deadline of timeout on the body of every request
// for which stream returns false, and clears it once the body has been read
// to its end, so that a handler that then waits (an acquisition waiting in
// line) is not cut. stream may be nil: no request is a stream.
//
// The deadline also bounds what net/http reads of a body after the
// handler (up to 256 KiB, to reuse the connection) when the handler
// answered without reading it all: a refusal, a 404. Without it a client
// trickling its body would hold the connection for as long as it cares
// to. Wrap everything the server serves, so that no route escapes it.
func BodyDeadline(next http.Handler, timeout time.Duration, stream func(*http.Request) bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if timeout <= 0 || r.Body == nil || r.Body == http.NoBody || (stream != nil && stream(r)) {
			next.ServeHTTP(w, r)
			return
		}
		if http.NewResponseController(w).SetReadDeadline(time.Now().Add(timeout)) == nil {
			r.Body = &deadlineBody{ReadCloser: r.Body, w: w}
		}
		next.ServeHTTP(w, r)
	})
}

type deadlineBody struct {
	io.ReadCloser
	once sync.Once
	w    http.ResponseWriter // whose read deadline to clear
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) {
		b.once.Do(b.clear)
	}
	return n, err
}

func (b *deadlineBody) clear() { _ = http.NewResponseController(b.w).SetReadDeadline(time.Time{}) }

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
		if r.Body != nil && enveloped(r) {
			r.Body = &envelopeBody{ReadCloser: r.Body, max: max, failed: func() { bodyFailed(r) }}
		}
		next.ServeHTTP(w, r)
	})
}

// enveloped reports whether r's body is a stream of enveloped messages:
// gRPC (application/grpc*) or Connect streaming (application/connect+*).
func enveloped(r *http.Request) bool {
	ct := r.Header.Get("Content-Type")
	return strings.HasPrefix(ct, "application/grpc") || strings.HasPrefix(ct, "application/connect+")
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
	failed  func() // told of a refused message
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
				b.failed()
				return n, err
			}
		}
	}
	return n, err
}
