package store

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.etcd.io/bbolt"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencehttp"
	"github.com/fencedio/fenced/internal/httplimit"
)

// HeaderAuditSeq carries the audit sequence number of the write that an
// answer is about: the write just made (PUT, DELETE) or the write that
// produced the value (GET). The fencing headers are fencehttp.HeaderScope and
// fencehttp.HeaderToken.
const HeaderAuditSeq = "Audit-Seq"

const (
	objectsPrefix     = "/v1/objects/"
	defaultAuditLimit = 1000
	maxAuditLimit     = 10000
)

// writeProblem answers with an RFC 9457 body. Fencing problems come from
// fencehttp.ProblemFor so that the store and the middleware answer alike;
// the others use type about:blank with the status text as title.
func writeProblem(w http.ResponseWriter, p *fencehttp.Problem) {
	if p.Type == "" {
		p.Type = "about:blank"
	}
	if p.Title == "" {
		p.Title = http.StatusText(p.Status)
	}
	w.Header().Set("Cache-Control", "no-store")
	fencehttp.WriteProblem(w, p)
}

// Handler returns the store's HTTP API (see the package documentation).
func (s *Store) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/audit", s.serveAudit)
	mux.HandleFunc("GET /v1/rejections", s.serveRejections)
	mux.HandleFunc("GET /rejections", s.serveRejectionsPage)
	mux.HandleFunc("GET /healthz", s.serveHealth)
	if s.cfg.Gatherer != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(s.cfg.Gatherer, promhttp.HandlerOpts{}))
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Object names may hold any printable text, "/", "." and ".."
		// included; the mux would clean and redirect such paths, so objects
		// bypass it and their names are taken from the escaped path.
		if rest, ok := strings.CutPrefix(r.URL.EscapedPath(), objectsPrefix); ok {
			s.serveObject(w, r, rest)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

func (s *Store) serveObject(w http.ResponseWriter, r *http.Request, escaped string) {
	name, err := url.PathUnescape(escaped)
	if err != nil {
		err = fmt.Errorf("%w: %v", ErrInvalidName, err)
	} else {
		err = ValidateName(name)
	}
	if err != nil {
		var op Op // metrics count writes only
		switch r.Method {
		case http.MethodPut:
			op = OpPut
		case http.MethodDelete:
			op = OpDelete
		}
		s.writeError(w, r, op, err)
		return
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		s.serveGet(w, r, name)
	case http.MethodPut:
		s.serveWrite(w, r, OpPut, name)
	case http.MethodDelete:
		s.serveWrite(w, r, OpDelete, name)
	default:
		w.Header().Set("Allow", "GET, HEAD, PUT, DELETE")
		writeProblem(w, &fencehttp.Problem{Status: http.StatusMethodNotAllowed,
			Detail: fmt.Sprintf("method %s is not supported on objects", r.Method)})
	}
}

func (s *Store) serveGet(w http.ResponseWriter, r *http.Request, name string) {
	obj, err := s.Get(r.Context(), name)
	if err != nil {
		s.writeError(w, r, "", err)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Length", strconv.Itoa(len(obj.Value)))
	h.Set("Cache-Control", "no-store")
	h.Set(fencehttp.HeaderScope, obj.Scope)
	h.Set(fencehttp.HeaderToken, strconv.FormatUint(obj.Token, 10))
	h.Set(HeaderAuditSeq, strconv.FormatUint(obj.Seq, 10))
	h.Set("Last-Modified", obj.Modified.Format(http.TimeFormat))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		w.Write(obj.Value)
	}
}

func (s *Store) serveWrite(w http.ResponseWriter, r *http.Request, op Op, name string) {
	scope, token, err := fencehttp.FromHeader(r.Header)
	if err != nil {
		s.writeError(w, r, op, err)
		return
	}
	if s.cfg.Authorize != nil {
		if err := s.cfg.Authorize(r, scope); err != nil {
			if !errors.Is(err, ErrUnauthenticated) && !errors.Is(err, ErrForbidden) {
				err = fmt.Errorf("%w: %w", ErrForbidden, err)
			}
			s.writeError(w, r, op, err)
			return
		}
	}
	var value []byte
	if op == OpPut {
		release, err := s.reserveBody(r)
		if err != nil {
			s.writeError(w, r, op, err)
			return
		}
		defer release()
		if value, err = s.readValue(w, r); err != nil {
			s.writeError(w, r, op, err)
			return
		}
	}
	seq, err := fencehttp.SequenceFromHeader(r.Header)
	if err != nil {
		s.writeError(w, r, op, err)
		return
	}
	ctx := fence.WithOwner(r.Context(), fencehttp.OwnerFromHeader(r.Header))
	if sig := r.Header.Get(fencehttp.HeaderSignature); sig != "" {
		ctx = fence.WithSignature(ctx, sig)
	}
	if seq != 0 {
		ctx = fence.WithSequence(ctx, seq)
	}
	var rec AuditRecord
	if op == OpPut {
		rec, err = s.Put(ctx, scope, token, name, value)
	} else {
		rec, err = s.Delete(ctx, scope, token, name)
	}
	if err != nil {
		s.writeError(w, r, op, err)
		return
	}
	w.Header().Set(HeaderAuditSeq, strconv.FormatUint(rec.Seq, 10))
	w.WriteHeader(http.StatusNoContent)
}

// errReadBody is a request body that ended early or broke; the client's
// problem, not the store's.
var errReadBody = errors.New("reading request body")

// reserveBody reserves the bytes r's body may take against
// MaxInFlightBytes, and against a quarter of it for r's client address, or
// refuses with ErrBusy. The returned func gives them back.
func (s *Store) reserveBody(r *http.Request) (func(), error) {
	n := s.cfg.MaxValueBytes
	if r.ContentLength >= 0 && r.ContentLength < n {
		n = r.ContentLength
	}
	addr := r.RemoteAddr
	if host, _, err := net.SplitHostPort(addr); err == nil {
		addr = host
	}
	perAddr := max(s.cfg.MaxInFlightBytes/4, s.cfg.MaxValueBytes)
	f := &s.inFlight
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.total+n > s.cfg.MaxInFlightBytes:
		return nil, fmt.Errorf("%w: %d body bytes held by PUTs in flight, this one may take %d (limit %d)",
			ErrBusy, f.total, n, s.cfg.MaxInFlightBytes)
	case f.byAddr[addr]+n > perAddr:
		return nil, fmt.Errorf("%w: %d body bytes held by PUTs in flight from %s, this one may take %d (limit %d per client)",
			ErrBusy, f.byAddr[addr], addr, n, perAddr)
	}
	if f.byAddr == nil {
		f.byAddr = make(map[string]int64)
	}
	f.total += n
	f.byAddr[addr] += n
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.total -= n
		if f.byAddr[addr] -= n; f.byAddr[addr] <= 0 {
			delete(f.byAddr, addr)
		}
	}, nil
}

func (s *Store) readValue(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	limit := s.cfg.MaxValueBytes
	if r.ContentLength > limit {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, r.ContentLength, limit)
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return nil, fmt.Errorf("%w: limit %d bytes", ErrTooLarge, limit)
		}
		return nil, fmt.Errorf("%w: %v", errReadBody, err)
	}
	return b, nil
}

// writeError maps every error of the object API to its answer; it is the one
// place where store and fence errors become HTTP statuses.
func (s *Store) writeError(w http.ResponseWriter, r *http.Request, op Op, err error) {
	var p *fencehttp.Problem
	reason := ""
	switch {
	case errors.Is(err, fence.ErrStaleToken), errors.Is(err, fence.ErrDuplicate), errors.Is(err, fence.ErrSequenceGap):
		// Counted and logged by write, for HTTP and Go callers alike.
		p = fencehttp.ProblemFor(err)
	case errors.Is(err, fence.ErrInvalidSequence):
		reason = reasonMalformed
		p = fencehttp.ProblemFor(err)
	case errors.Is(err, fence.ErrNoToken):
		reason = reasonMissingToken
		p = fencehttp.ProblemFor(err)
	case errors.Is(err, fencehttp.ErrInvalidToken), errors.Is(err, fence.ErrInvalidScope):
		reason = reasonMalformed
		p = fencehttp.ProblemFor(err)
	case errors.Is(err, fence.ErrBadSignature):
		reason = reasonBadSignature
		p = fencehttp.ProblemFor(err)
	case errors.Is(err, ErrUnauthenticated):
		reason = reasonDenied
		p = &fencehttp.Problem{Status: http.StatusUnauthorized, Title: "Authentication required", Detail: err.Error()}
	case errors.Is(err, ErrForbidden):
		reason = reasonDenied
		p = &fencehttp.Problem{Status: http.StatusForbidden, Title: "Write not permitted", Detail: err.Error()}
	case errors.Is(err, ErrInvalidName):
		reason = reasonMalformed
		p = &fencehttp.Problem{Status: http.StatusBadRequest, Title: "Invalid object name", Detail: err.Error()}
	case errors.Is(err, errReadBody):
		reason = reasonMalformed
		p = &fencehttp.Problem{Status: http.StatusBadRequest, Detail: err.Error()}
	case errors.Is(err, ErrTooLarge):
		reason = reasonTooLarge
		p = &fencehttp.Problem{Status: http.StatusRequestEntityTooLarge, Detail: err.Error()}
	case errors.Is(err, ErrNotFound):
		// Counted by write for deletes; reads are not writes.
		p = &fencehttp.Problem{Status: http.StatusNotFound, Detail: err.Error()}
	case errors.Is(err, ErrBusy):
		reason = reasonBusy
		w.Header().Set("Retry-After", "1")
		p = &fencehttp.Problem{Status: http.StatusServiceUnavailable, Detail: err.Error()}
	case errors.Is(err, ErrClosed):
		p = &fencehttp.Problem{Status: http.StatusServiceUnavailable, Detail: err.Error()}
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// The client is gone or gave up before the write began; nothing
		// was applied.
		p = &fencehttp.Problem{Status: http.StatusServiceUnavailable, Detail: err.Error()}
	default:
		s.log.ErrorContext(r.Context(), "store request failed", "method", r.Method, "path", r.URL.Path, "error", err)
		p = &fencehttp.Problem{Status: http.StatusInternalServerError, Detail: "internal error; see the store's log"}
	}
	if reason != "" && op != "" {
		s.metrics.rejected.WithLabelValues(string(op), reason).Inc()
	}
	writeProblem(w, p)
}

// AuditPage is the body of GET /v1/audit.
type AuditPage struct {
	Records []AuditRecord `json:"records"`
	// Next is the after value for the following page: the Seq of the last
	// record, or the requested after when there are none.
	Next uint64 `json:"next"`
}

func (s *Store) serveAudit(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var after uint64
	if v := q.Get("after"); v != "" {
		a, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			writeProblem(w, &fencehttp.Problem{Status: http.StatusBadRequest, Detail: fmt.Sprintf("after=%q is not a uint64", v)})
			return
		}
		after = a
	}
	limit := defaultAuditLimit
	if v := q.Get("limit"); v != "" {
		l, err := strconv.Atoi(v)
		if err != nil || l < 1 || l > maxAuditLimit {
			writeProblem(w, &fencehttp.Problem{Status: http.StatusBadRequest,
				Detail: fmt.Sprintf("limit=%q is not in 1..%d", v, maxAuditLimit)})
			return
		}
		limit = l
	}
	recs, err := s.AuditAfter(r.Context(), after, limit)
	if err != nil {
		s.writeError(w, r, "", err)
		return
	}
	page := AuditPage{Records: recs, Next: after}
	if page.Records == nil {
		page.Records = []AuditRecord{}
	}
	if n := len(recs); n > 0 {
		page.Next = recs[n-1].Seq
	}
	writeJSON(w, page)
}

// RejectionsPage is the body of GET /v1/rejections.
type RejectionsPage struct {
	NoFencing bool        `json:"noFencing"`
	Count     uint64      `json:"count"`  // stale rejections since the store opened
	Recent    []Rejection `json:"recent"` // newest first, at most 100
}

func (s *Store) serveRejections(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, RejectionsPage{NoFencing: s.cfg.NoFencing, Count: s.RejectionCount(), Recent: s.Rejections()})
}

func (s *Store) serveHealth(w http.ResponseWriter, r *http.Request) {
	err := s.usable(r.Context())
	if err == nil {
		err = s.db.View(func(*bbolt.Tx) error { return nil })
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "unavailable: %v\n", err)
		return
	}
	io.WriteString(w, "ok\n")
}

func writeJSON(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeProblem(w, &fencehttp.Problem{Status: http.StatusInternalServerError, Detail: err.Error()})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Write(append(b, '\n'))
}

// Serve answers the store's HTTP API on ln until ctx is done, then shuts the
// server down gracefully (in-flight requests get up to ShutdownTimeout) and
// returns nil. It does not close the store. A listener failure is returned
// as is.
func (s *Store) Serve(ctx context.Context, ln net.Listener) error {
	limits := s.cfg.httpLimits()
	srv := limits.Server(httplimit.BodyDeadline(s.Handler(), limits.BodyTimeout, nil))
	srv.ErrorLog = slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)
	srv.BaseContext = func(net.Listener) context.Context { return context.WithoutCancel(ctx) }
	limited := limits.Listener(ln, nil, 0, nil)
	srv.RegisterOnShutdown(limited.CloseSilent)
	var served net.Listener = limited
	if s.cfg.TLS != nil {
		srv.Protocols = new(http.Protocols)
		srv.Protocols.SetHTTP1(true)
		srv.Protocols.SetHTTP2(true)
		served = tls.NewListener(limited, s.cfg.TLS)
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(served) }()
	select {
	case err := <-errc:
		return fmt.Errorf("store: serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
	defer cancel()
	err := srv.Shutdown(sctx)
	<-errc
	if err != nil {
		return fmt.Errorf("store: shutdown: %w", err)
	}
	return nil
}

// ShutdownTimeout bounds how long Serve waits for in-flight requests once
// its ctx is done.
const ShutdownTimeout = 10 * time.Second
