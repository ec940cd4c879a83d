package server

import (
	"context"
	"net/http"

	"github.com/fencedio/fenced/server/internal/admission"
	"github.com/fencedio/fenced/server/internal/apierr"
)

// Limits per client address. Without authentication a client is free to
// name a new owner for every call, so the per-owner quotas alone do not
// stop one client from taking every waiter slot or filling MaxLeases. A
// client is therefore also counted by the IP address its connection comes
// from: MaxConnsPerClient open connections, MaxCallsPerClient calls in
// progress (callslots.go), MaxWaitersPerClient waiting acquisitions and
// MaxLeasesPerClient current leases, each refused beyond its limit
// (resource_exhausted naming it; a connection is closed unread).
//
// The address is the TCP peer's, or over the peer port the one a
// forwarding node names (admission.CallerAddr). Calls through the Go API
// (Server.Acquire without an HTTP request) have no address and are counted
// only by the global limits. What the counts guarantee, and what not, is
// internal/admission's to say.

// callInfo is what the API's middleware learns of one request, carried in
// its context as one value that each layer fills in: one allocation and
// one copy of the request for all of them, not one per layer.
type callInfo struct {
	addr   string         // withClientAddr
	slot   admission.Slot // limitCalls
	auth   authResult     // authenticate, when authed is set
	authed bool
}

type callInfoKey struct{}

// callInfoOf is what is known of ctx's caller; nil when the call did not come over HTTP.
func callInfoOf(ctx context.Context) *callInfo {
	c, _ := ctx.Value(callInfoKey{}).(*callInfo)
	return c
}

// withClientAddr puts the caller's address (admission.CallerAddr) in the
// request's context.
func withClientAddr(next http.Handler, peer bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		addr := admission.CallerAddr(r, peer)
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callInfoKey{}, &callInfo{addr: addr})))
	})
}

// clientAddr is the address of ctx's caller; "" when the call did not come
// over HTTP.
func clientAddr(ctx context.Context) string {
	if c := callInfoOf(ctx); c != nil {
		return c.addr
	}
	return ""
}

// forwardClient names ctx's caller on the headers of a forwarded call.
func forwardClient(ctx context.Context, h http.Header) {
	if addr := clientAddr(ctx); addr != "" {
		h.Set(admission.ForwardedClientHeader, addr)
	}
}

// checkClientLeases refuses an acquisition by a caller from addr once addr
// holds MaxLeasesPerClient leases.
func (s *Server) checkClientLeases(addr string) error {
	if addr == "" {
		return nil
	}
	if n := s.clientLeases.Count(addr); n >= s.cfg.MaxLeasesPerClient {
		return &apierr.QuotaError{Quota: "max-leases-per-client", Of: "client address", Owner: addr, Used: n, Limit: s.cfg.MaxLeasesPerClient}
	}
	return nil
}
