package fencehttp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/internal/guarded"
)

// Config configures Middleware; a zero field means the default documented
// on it.
type Config struct {
	// ScopeFunc derives the scope from the request (for example from its
	// path) instead of the Fencing-Scope header, which is then ignored. The
	// result is validated like a header value; an error from it answers 400
	// with the text of the error as the problem's detail.
	//
	// The mapping is the server's to choose (invariant I6 allows it when
	// configured): a client's token fences whatever scope ScopeFunc
	// returns. Default: the Fencing-Scope header.
	ScopeFunc func(*http.Request) (string, error)
	// FailedStatus decides which final statuses of the wrapped handler
	// count as a failed mutation; a failed mutation does not record its
	// token. Default: status >= 500. A 4xx answer still records the token:
	// the request proved it holds a current token, and recording it only
	// fences older holders.
	FailedStatus func(status int) bool
	// Logger is where the middleware reports the one case it cannot fix in
	// its answer: the handler answered, but the guard then failed to record
	// the token. Default: slog.Default().
	Logger *slog.Logger
}

type config struct {
	scopeFunc func(*http.Request) (string, error)
	failed    func(status int) bool
	logger    *slog.Logger
}

// Middleware fences every request whose method is not safe (anything but
// GET, HEAD, OPTIONS and TRACE; this covers PUT, POST, PATCH and DELETE and
// also extension methods such as WebDAV's) with g. Safe methods pass through
// without a token.
//
// A fenced request runs the next handler inside g.Do, so the token check and
// whatever the handler changes are atomic with respect to other fenced
// requests of the same scope, and the handler's request context is the one
// g.Do passes to apply (a guard may carry a transaction in it, as
// fencesql.Guard.TxGuard does), with the checked scope and token
// (ScopeFromContext, TokenFromContext). The token is
// recorded when the handler's final status is not a failure (see
// Config.FailedStatus); a handler that writes nothing answers 200 and succeeds.
//
// Answers given without calling the handler (all application/problem+json):
// 428 when the token is missing, 400 when the token or scope is malformed
// or the token is above what the guard can store (fence.ErrTokenOutOfRange),
// 409 when the token is stale, 409 of its own type for a duplicate or a
// gap in Fencing-Sequence (see ProblemFor), 400 for an invalid sequence,
// 503 when the guard fails or the request ends
// while waiting for it.
//
// A panic in the handler is recovered inside g.Do, so the guard records
// nothing and releases the scope, and is then raised again.
func Middleware(g fence.Guard, cfg Config) func(http.Handler) http.Handler {
	if g == nil {
		panic("fencehttp: Middleware with a nil Guard")
	}
	c := config{scopeFunc: cfg.ScopeFunc, failed: cfg.FailedStatus, logger: cfg.Logger}
	if c.failed == nil {
		c.failed = func(status int) bool { return status >= http.StatusInternalServerError }
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	return func(next http.Handler) http.Handler {
		return &middleware{guard: g, next: next, config: c}
	}
}

type middleware struct {
	guard fence.Guard
	next  http.Handler
	config
}

// errHandlerFailed tells the guard not to record the token: the handler
// answered with a failure status. The answer is already written.
var errHandlerFailed = errors.New("fencehttp: handler answered with a failure status")

func (m *middleware) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if safeMethod(r.Method) {
		m.next.ServeHTTP(w, r)
		return
	}
	scope, token, err := m.credentials(r)
	if err != nil {
		WriteProblem(w, ProblemFor(err))
		return
	}
	seq, err := SequenceFromHeader(r.Header)
	if err != nil {
		WriteProblem(w, ProblemFor(err))
		return
	}
	rec := &statusRecorder{ResponseWriter: w}
	ctx := fence.WithOwner(r.Context(), OwnerFromHeader(r.Header))
	if seq != 0 {
		ctx = fence.WithSequence(ctx, seq)
	}
	if sig := r.Header.Get(HeaderSignature); sig != "" {
		ctx = fence.WithSignature(ctx, sig)
	}
	ran, _, err := guarded.Do(ctx, m.guard, scope, token, func(ctx context.Context) error {
		m.next.ServeHTTP(rec, r.WithContext(withCredentials(ctx, scope, token)))
		if m.failed(rec.final()) {
			return errHandlerFailed
		}
		return nil
	})
	if !ran {
		WriteProblem(w, ProblemFor(err))
		return
	}
	if err != nil && !errors.Is(err, errHandlerFailed) {
		// The answer is out and cannot be taken back; the token was not
		// recorded, so an older holder is not fenced by this write.
		m.logger.LogAttrs(r.Context(), slog.LevelError, "fencing guard failed after the handler answered; token not recorded",
			slog.String("scope", scope),
			slog.Uint64("presented_token", token),
			slog.Int("status", rec.final()),
			slog.Any("error", err))
	}
}

func (m *middleware) credentials(r *http.Request) (string, uint64, error) {
	if m.scopeFunc == nil {
		return FromHeader(r.Header)
	}
	token, err := TokenFromHeader(r.Header)
	if err != nil {
		return "", 0, err
	}
	scope, err := m.scopeFunc(r)
	if err != nil {
		// %v, not %w: the answer is about the scope, whatever f's error wraps.
		return "", 0, fmt.Errorf("%w: %v", fence.ErrInvalidScope, err)
	}
	if err := fence.ValidateScope(scope); err != nil {
		return "", 0, err
	}
	return scope, token, nil
}

func safeMethod(m string) bool {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return false
}

// statusRecorder remembers the handler's final status. Unwrap lets
// http.ResponseController reach the writer's other capabilities.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 && code >= 200 { // 1xx answers are interim
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Flush keeps the http.Flusher type assertion working for handlers that
// stream their answer.
func (s *statusRecorder) Flush() {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	_ = http.NewResponseController(s.ResponseWriter).Flush()
}

func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// final is the status the client sees: net/http sends 200 for a handler
// that wrote nothing (or flushed or hijacked through Unwrap).
func (s *statusRecorder) final() int {
	if s.status == 0 {
		return http.StatusOK
	}
	return s.status
}
