package server

import (
	"context"
	"net"
	"net/http"

	"github.com/fencedio/fenced/internal/gen/fenced/v1/fencedv1connect"
	"github.com/fencedio/fenced/internal/httplimit"
)

// httpLimits are the limits of the API's HTTP server, from the Config.
func (s *Server) httpLimits() httplimit.Limits {
	return httplimit.Limits{MaxHeaderBytes: s.cfg.MaxHeaderBytes, IdleTimeout: s.cfg.IdleTimeout,
		BodyTimeout: s.cfg.BodyReadTimeout, MaxConns: s.cfg.MaxConns, ReadHeaderTimeout: s.cfg.ReadHeaderTimeout}
}

// newHTTPServer is the API's HTTP server: HTTP/1.1 and HTTP/2 without TLS,
// with the limits of httpLimits. Serve it on limitListener.
func (s *Server) newHTTPServer() *http.Server {
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	srv := s.httpLimits().Server(s.Handler())
	srv.Protocols = protocols
	srv.BaseContext = func(net.Listener) context.Context { return s.baseContext() }
	return srv
}

// limitListener caps the API's open connections (Config.MaxConns).
func (s *Server) limitListener(ln net.Listener) net.Listener {
	return httplimit.Listener(bufferedListener{ln}, s.cfg.MaxConns)
}

// limitRPC applies the per-request limits to the lease API: a read deadline
// on unary bodies, and streamed messages whose length prefix exceeds
// MaxBodyBytes refused before their payload is read.
func (s *Server) limitRPC(h http.Handler) http.Handler {
	h = httplimit.EnvelopeLimit(h, s.cfg.MaxBodyBytes)
	return httplimit.BodyDeadline(h, s.cfg.BodyReadTimeout, isStreamProcedure)
}

// isStreamProcedure reports whether r calls a streaming procedure, whose
// body may legitimately stay open (KeepAlive) and whose request context a
// read deadline must not end (Watch over HTTP/1.1).
func isStreamProcedure(r *http.Request) bool {
	return r.URL.Path == fencedv1connect.LeaseServiceWatchProcedure || r.URL.Path == fencedv1connect.LeaseServiceKeepAliveProcedure
}
