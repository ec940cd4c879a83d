package server

import (
	"context"
	"net/http"

	"connectrpc.com/connect"
	"github.com/fencedio/fenced/server/internal/apierr"
)

// Calls in progress per client address (Config.MaxCallsPerClient). The
// other limits bound what a client holds (leases, waiters, connections);
// this one bounds the work it makes the server do at once. Every call
// the server works on takes a turn on its cores: a client that sends
// thousands of calls at once, each cheap to refuse further in, queues them
// all in front of everyone else's. With at most MaxCallsPerClient of them
// worked on at once, the rest are refused at the door (resource_exhausted
// naming max-calls-per-client), before their body is read or decoded,
// and other clients' calls wait behind at most that many of its calls.
//
// An acquisition waiting in line for a held key is not in progress: it
// gives its slot back while it waits (waiters have limits of their own).
// Streams (Watch, KeepAlive) take no slot either; their per-client limits
// bound them. Calls without a client address (the Go API) are not
// counted.

// releaseCallSlot gives back the slot of ctx's call, if it holds one: the
// call is about to wait for something other than the server's cores.
func releaseCallSlot(ctx context.Context) {
	if c := callInfoOf(ctx); c != nil {
		c.slot.Release()
	}
}

// limitCalls refuses a unary call from a client address that already has
// Config.MaxCallsPerClient calls in progress, before anything else is done
// with it: the answer is written in the call's protocol (Connect, gRPC or
// gRPC-Web) by connect's ErrorWriter, and its body is not read: over
// HTTP/1.1 the connection is closed after the answer.
func (s *Server) limitCalls(h http.Handler) http.Handler {
	refuse := connect.NewErrorWriter(s.handlerOptions()...)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := callInfoOf(r.Context())
		if c == nil || c.addr == "" || isStreamProcedure(r) {
			h.ServeHTTP(w, r)
			return
		}
		addr := c.addr
		ok, n := s.calls.Take(addr, &c.slot)
		if !ok {
			s.metrics.refused("max-calls-per-client")
			if r.ProtoMajor == 1 {
				// Else net/http reads the unread body before answering.
				w.Header().Set("Connection", "close")
			}
			_ = refuse.Write(w, r, apierr.Connect(&apierr.QuotaError{Quota: "max-calls-per-client", Of: "client address",
				Owner: addr, Used: n, Limit: s.cfg.MaxCallsPerClient}))
			return
		}
		defer c.slot.Release()
		h.ServeHTTP(w, r)
	})
}
