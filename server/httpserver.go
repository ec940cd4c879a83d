package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"connectrpc.com/connect"
	"github.com/fencedio/fenced/api/fenced/v1/fencedv1connect"
	"github.com/fencedio/fenced/internal/failpoint/failstore"
	"github.com/fencedio/fenced/internal/httplimit"
	"github.com/fencedio/fenced/server/internal/admission"
	"github.com/fencedio/fenced/server/internal/streamwrite"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// newHTTPServer is the API's HTTP server: HTTP/1.1 and HTTP/2 without TLS,
// with the limits of httpLimits. Serve it on limitListener.
func (s *Server) newHTTPServer() *http.Server {
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	srv := s.cfg.httpLimits().Server(failstore.WrapAckHandler(s.Handler()))
	srv.Protocols = protocols
	srv.BaseContext = func(net.Listener) context.Context { return s.baseContext() }
	srv.ConnContext = streamwrite.ConnContext // for the streams' bound on unacknowledged bytes
	srv.ErrorLog = s.httpErrorLog()
	return srv
}

// streamCut counts a stream cut for leaving more than StreamUnackedBytes
// unacknowledged, with the refusals of the other limits.
func (s *Server) streamCut() { s.metrics.Refused("stream-unacked-bytes") }

// httpErrorLog is where net/http reports what it cannot hand to a handler
// (a failed TLS handshake, a malformed request): records of Logger at
// warning level, not lines in the standard logger's text format.
func (s *Server) httpErrorLog() *log.Logger {
	return slog.NewLogLogger(s.cfg.Logger.Handler(), slog.LevelWarn)
}

// limitListener caps the API's open connections (Config.MaxConns and
// MaxConnsPerClient).
func (s *Server) limitListener(ln net.Listener) *httplimit.Listener {
	perNetwork := s.cfg.networkShare(s.cfg.MaxConnsPerClient, s.cfg.MaxConns)
	return s.cfg.httpLimits().Listener(admission.BufferedListener{Listener: ln}, s.calls.Networks.Of, perNetwork, func(c net.Conn, network string) {
		if network != "" {
			s.metrics.Refused("max-conns-per-network")
			s.refusedConns.Log(s.log, network, true, perNetwork)
			return
		}
		s.metrics.Refused("max-conns-per-client")
		s.refusedConns.Log(s.log, admission.ClientIP(c.RemoteAddr().String()), false, s.cfg.MaxConnsPerClient)
	})
}

// limitRPC refuses streamed messages whose length prefix exceeds
// MaxBodyBytes before their payload is read. (The body deadline is
// handler's, for every route.)
func (s *Server) limitRPC(h http.Handler) http.Handler {
	return httplimit.EnvelopeLimit(h, s.cfg.MaxBodyBytes)
}

// isStreamProcedure reports whether r calls a streaming procedure, whose
// body may legitimately stay open (KeepAlive, Session) and whose request
// context a read deadline must not end (Watch over HTTP/1.1).
func isStreamProcedure(r *http.Request) bool {
	switch r.URL.Path {
	case fencedv1connect.LeaseServiceWatchProcedure, fencedv1connect.LeaseServiceKeepAliveProcedure, fencedv1connect.LeaseServiceSessionProcedure:
		return true
	}
	return false
}

// Handler returns the HTTP handler of the lease API, /healthz and /metrics.
func (s *Server) Handler() http.Handler { return s.handler(false) }

// handler is Handler for the public port (peer false) or for the calls
// other nodes forward over the peer port (peer true). Only the latter
// trusts the principal a forwarding node names (security.ForwardedPrincipalHeader);
// on the public port that header is ignored and callers authenticate
// themselves.
func (s *Server) handler(peer bool) http.Handler {
	mux := http.NewServeMux()
	path, h := fencedv1connect.NewLeaseServiceHandler(s.leaseService(), s.handlerOptions()...)
	mux.Handle(path, s.limitCalls(admission.ExplainRefusals(streamwrite.Wrap(s.limitRPC(s.authenticate(limitBody(s.takeTurns(h), s.cfg.MaxBodyBytes), peer)), isStreamProcedure, s.cfg.StreamUnackedBytes, s.streamCut))))
	path, h = fencedv1connect.NewAdminServiceHandler(s.adminService(), s.handlerOptions()...)
	mux.Handle(path, s.limitCalls(s.limitRPC(s.authenticate(limitBody(s.takeTurns(h), s.cfg.MaxBodyBytes), peer))))
	mux.HandleFunc("GET /healthz", s.healthz)
	mux.HandleFunc("GET /v1/keys", s.serveKeys)
	mux.HandleFunc("GET /v1/role", s.serveRole)
	mux.Handle("GET /v1/backup", s.authenticate(s.httpAuth().RequireAdminHTTP(http.HandlerFunc(s.serveBackup)), peer))
	adminPath, adminHandler := fencedv1connect.NewClusterServiceHandler(s.clusterService(),
		append(s.handlerOptions(), connect.WithInterceptors(s.authz.RequireAdmin()))...)
	mux.Handle(adminPath, s.authenticate(limitBody(adminHandler, s.cfg.MaxBodyBytes), peer))
	s.registerRejections(mux, peer)
	s.dashboard.Register(mux)
	if s.cfg.Profiling {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.cfg.Gatherer, promhttp.HandlerOpts{}))
	// The body deadline comes first, so that every body is bounded, those
	// of calls refused before they are read included.
	served := httplimit.BodyDeadline(admission.WithCallerAddr(s.httpAuth().ProtectDashboard(mux, peer), peer),
		s.cfg.BodyReadTimeout, isStreamProcedure)
	if peer {
		// A forwarded call's answer goes back through the forwarding
		// node, whose own handler names the cluster: the leader's would
		// come along with it, a second copy of the header.
		return served
	}
	return s.withClusterID(served)
}

// ClusterIDHeader carries the node's cluster ID (hex) on every response of
// the API port, errors included, once the node belongs to a cluster. All
// members of a cluster answer with the same ID, forwarded calls too; a
// client pins the ID of its first answer and never uses an answer of
// another cluster (docs/client-algorithm.md).
const ClusterIDHeader = "Fenced-Cluster-Id"

// withClusterID sets ClusterIDHeader before h answers. The ID is read per
// response: a node gets one when it forms its cluster or is added to one.
func (s *Server) withClusterID(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id := s.ident.Cluster(); id != "" {
			w.Header().Set(ClusterIDHeader, id)
		}
		h.ServeHTTP(w, r)
	})
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	if !s.canServe() {
		http.Error(w, "not serving acquisitions: no leader yet, or no contact with it", http.StatusServiceUnavailable)
		return
	}
	if stalled := s.applyStalled(time.Now()); stalled > 0 {
		http.Error(w, fmt.Sprintf("apply path stalled: %d log writes pending, no progress for %v (limit %v)",
			s.applyPending.Load(), stalled.Round(time.Millisecond), s.cfg.ApplyStallTimeout), http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ok")
}

// applyStalled returns how long log writes have been pending without any
// being applied, if that exceeds Config.ApplyStallTimeout, and 0 otherwise.
// A leader that answers heartbeats but cannot apply (a hung disk, a
// saturated FSM) refuses every acquisition; this lets /healthz say so.
func (s *Server) applyStalled(now time.Time) time.Duration {
	if s.applyPending.Load() == 0 {
		return 0
	}
	since := now.Sub(time.Unix(0, s.applyProgress.Load()))
	if since <= s.cfg.ApplyStallTimeout {
		return 0
	}
	return since
}

// Serve listens on Config.Listen and serves until ctx ends or Close is
// called, then shuts down gracefully.
func (s *Server) Serve(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", s.cfg.Listen, err)
	}
	return s.ServeListener(ctx, ln)
}

// ServeListener is Serve on an existing listener.
func (s *Server) ServeListener(ctx context.Context, ln net.Listener) error {
	limited := s.limitListener(ln)
	var served net.Listener = limited
	var protocols *http.Protocols
	if s.sec.TLS != nil {
		// Only TLS: the buffer sits under it, so that net/http sees the
		// *tls.Conn it negotiates HTTP/2 on and answers plaintext HTTP
		// with 400.
		protocols = new(http.Protocols)
		protocols.SetHTTP1(true)
		protocols.SetHTTP2(true)
		served = tls.NewListener(served, s.sec.TLS.ServerConfig())
	}
	s.mu.Lock()
	if s.ctx.Err() != nil {
		// Closed: Close has read s.http already, and would not stop this one.
		s.mu.Unlock()
		ln.Close()
		return s.failed()
	}
	s.listener = ln
	s.http = s.newHTTPServer()
	s.http.RegisterOnShutdown(limited.CloseSilent)
	if protocols != nil {
		s.http.Protocols = protocols
	}
	srv := s.http
	s.mu.Unlock()
	errc := make(chan error, 1)
	if !s.spawn(func() { errc <- srv.Serve(served) }) {
		return s.failed() // closed meanwhile, and srv with it
	}
	select {
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return s.failed()
		}
		return err
	case <-ctx.Done():
		return s.Close()
	case <-s.ctx.Done():
		return s.failed()
	}
}

// baseContext is the context requests derive from. Close ends it with
// cause apierr.ErrClosed, which ends open Watch streams; writes in flight still get
// their outcome (see await).
func (s *Server) baseContext() context.Context { return s.ctx }

// Addr returns the address the API listens on, once serving.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.listener == nil {
		return nil
	}
	return s.listener.Addr()
}
