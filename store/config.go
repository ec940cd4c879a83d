package store

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/internal/httplimit"
)

// Config configures a Store. The zero value of every field except DataDir
// is usable.
type Config struct {
	// DataDir holds the store's bbolt file (FileName). It is created if
	// missing. Required.
	DataDir string

	// NoFencing makes the store accept stale tokens: the scope and token
	// headers are still required and validated and every write is still
	// audited (with HighestBefore, so checkers can see stale overwrites), but
	// a write that the guard rejects as stale is applied anyway, in a
	// transaction of its own that leaves the highest token as it is. A
	// negative control for demos and torture tests only; Open logs a loud
	// warning.
	NoFencing bool

	// StrictSequences refuses, with 409 and the problem type
	// urn:fenced:problem:sequence-gap (fence.ErrSequenceGap), a write whose
	// Fencing-Sequence is not the last one accepted under its token plus 1:
	// for writers that want a lost write to stop the ones after it
	// (docs/guard-spec.md, section 7). A write with a higher token, or
	// without a sequence, is decided as without it. Default: off, a
	// sequence may skip ahead.
	StrictSequences bool

	// MaxValueBytes limits the size of a value; larger PUTs get 413.
	// Default DefaultMaxValueBytes (1 MiB).
	MaxValueBytes int64

	// MaxInFlightBytes bounds the request body bytes that PUTs over HTTP
	// hold at once, from before their body is read until their write is
	// done: each reserves its Content-Length, or MaxValueBytes when the
	// length is not given. One client IP address may hold a quarter of
	// it (at least MaxValueBytes), so that a client stalling its bodies
	// leaves room for the others. A PUT that would go beyond either is
	// refused with 503 and Retry-After before its body is read (ErrBusy).
	// Default DefaultMaxInFlightBytes (32 MiB); at least MaxValueBytes.
	MaxInFlightBytes int64

	// MaxHeaderBytes, ReadHeaderTimeout, IdleTimeout, BodyReadTimeout,
	// MaxConns and MaxConnsPerClient limit Serve's HTTP server: headers
	// above MaxHeaderBytes get 431, keep-alive connections idle for
	// IdleTimeout are closed, a body not received within BodyReadTimeout
	// fails, and at most MaxConns connections are open at once, at most
	// MaxConnsPerClient from one IP address. Defaults 64 KiB, 10s, 60s,
	// 30s, three quarters of the file descriptor limit, and a tenth of
	// MaxConns (at least 64) (see httplimit).
	MaxHeaderBytes    int
	ReadHeaderTimeout time.Duration
	IdleTimeout       time.Duration
	BodyReadTimeout   time.Duration
	MaxConns          int
	MaxConnsPerClient int

	// Logger receives stale rejections (Warn) and accepted writes (Debug).
	// Default slog.Default().
	Logger *slog.Logger

	// Registerer receives the fenced_store_* metrics. Default: a private
	// registry (with Go and process collectors) served on /metrics.
	Registerer prometheus.Registerer

	// Gatherer is what /metrics serves. Default: Registerer if it is also a
	// Gatherer (a *prometheus.Registry is), else nothing is served there.
	Gatherer prometheus.Gatherer

	// Observer, if set, is told of every stale rejection and every accepted
	// write, after commit and outside any lock.
	Observer fence.Observer

	// Verifier, if set, refuses every Put and Delete whose token's
	// signature (fence.SignatureFrom the context; Fencing-Token-Signature
	// over HTTP) it does not accept, before anything is read or written:
	// see fence.NewSignedGuard. Default: none, tokens are not checked for
	// signatures.
	Verifier *fence.Verifier

	// Authorize, if set, is asked before every PUT and DELETE over HTTP,
	// with the request and the scope it writes in; an error refuses the
	// write before anything is read or written: 401 if it matches
	// ErrUnauthenticated, 403 otherwise. fenced store sets it from
	// --auth-file. Default: none, every writer is welcome.
	Authorize func(r *http.Request, scope string) error

	// TLS, if set, makes Serve speak only TLS on its listener, HTTP/1.1 and
	// HTTP/2 as the client asks in ALPN; Serve wraps the listener itself,
	// under its connection limits, so that net/http sees the TLS
	// connection it negotiates HTTP/2 on. fenced store sets it from
	// --cert-file. Default: none, plaintext HTTP/1.1.
	TLS *tls.Config

	// Now stamps audit records. Default time.Now.
	Now func() time.Time
}

// Validate reports whether the configuration can be used. It does not
// change c; Open applies the defaults to its own copy.
func (c Config) Validate() error {
	if c.DataDir == "" {
		return errors.New("store: DataDir is required")
	}
	if c.MaxValueBytes < 0 {
		return fmt.Errorf("store: MaxValueBytes %d is negative", c.MaxValueBytes)
	}
	if d := c.withDefaults(); c.MaxInFlightBytes < 0 || d.MaxInFlightBytes < d.MaxValueBytes {
		return fmt.Errorf("store: MaxInFlightBytes %d is negative or below MaxValueBytes %d", c.MaxInFlightBytes, d.MaxValueBytes)
	}
	if err := c.httpLimits().Validate(); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	return nil
}

// httpLimits are Serve's limits, with defaults filled in.
func (c Config) httpLimits() httplimit.Limits {
	return httplimit.Limits{MaxHeaderBytes: c.MaxHeaderBytes, ReadHeaderTimeout: c.ReadHeaderTimeout,
		IdleTimeout: c.IdleTimeout, BodyTimeout: c.BodyReadTimeout, MaxConns: c.MaxConns,
		MaxConnsPerClient: c.MaxConnsPerClient}.WithDefaults()
}

// withDefaults returns c with each zero field set to its default.
func (c Config) withDefaults() Config {
	if c.MaxValueBytes == 0 {
		c.MaxValueBytes = DefaultMaxValueBytes
	}
	if c.MaxInFlightBytes == 0 {
		c.MaxInFlightBytes = max(DefaultMaxInFlightBytes, c.MaxValueBytes)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Registerer == nil {
		reg := prometheus.NewRegistry()
		reg.MustRegister(
			prometheus.NewGoCollector(),
			prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}),
		)
		c.Registerer = reg
	}
	if c.Gatherer == nil {
		if g, ok := c.Registerer.(prometheus.Gatherer); ok {
			c.Gatherer = g
		}
	}
	return c
}
