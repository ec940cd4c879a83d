package server

import (
	"context"
	"net/http"

	"connectrpc.com/connect"
	"github.com/fencedio/fenced/server/internal/admission"
	"github.com/fencedio/fenced/server/internal/apierr"
)

// Limits per client address. Without authentication a client is free to
// name a new owner for every call, so the per-owner quotas alone do not
// stop one client from taking every waiter slot or filling MaxLeases. A
// client is therefore also counted by the IP address its connection comes
// from: MaxConnsPerClient open connections, MaxCallsPerClient calls in
// progress (limitCalls), MaxWaitersPerClient waiting acquisitions and
// MaxLeasesPerClient current leases, each refused beyond its limit
// (resource_exhausted naming it; a connection is closed unread).
//
// The address is the TCP peer's, or over the peer port the one a
// forwarding node names (admission.CallerAddr), carried in the request's
// context (admission.WithCallerAddr) with its call slot and what
// authentication found. Calls through the Go API (Server.Acquire without
// an HTTP request) have no address and are counted only by the global
// limits. What the counts guarantee, and what not, is internal/admission's
// to say.

// checkClientLeases refuses an acquisition by a caller from addr once addr
// holds MaxLeasesPerClient leases, or its network NetworkShare times as
// many.
func (s *Server) checkClientLeases(addr string) error {
	if addr == "" {
		return nil
	}
	n, inNetwork := s.clientLeases.Count(addr)
	if n >= s.cfg.MaxLeasesPerClient {
		return &apierr.QuotaError{Quota: "max-leases-per-client", Of: "client address", Owner: addr, Used: n, Limit: s.cfg.MaxLeasesPerClient}
	}
	if limit := s.cfg.networkShare(s.cfg.MaxLeasesPerClient, s.cfg.MaxLeases); inNetwork >= limit {
		return &apierr.QuotaError{Quota: "max-leases-per-network", Of: "client network", Owner: s.calls.Networks.Of(addr), Used: inNetwork, Limit: limit}
	}
	return nil
}

// Calls in progress per client address (Config.MaxCallsPerClient) and
// per client network (NetworkShare times that), then in turns by network
// (Config.MaxCallsInProgress, admission.FairGate). The
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
// gives its slot back while it waits (admission.ReleaseSlot; waiters have
// limits of their own). Streams (Watch, KeepAlive, Session) take no slot
// either; their per-client limits bound them. Each call a Session stream
// carries is admitted as a unary call is (admitStreamCall). Calls without
// a client address (the Go API) are not counted.

// limitCalls refuses a unary call from a client address that already has
// Config.MaxCallsPerClient calls in progress, before anything else is done
// with it (admission.LimitCalls): the answer is written in the call's
// protocol (Connect, gRPC or gRPC-Web) by connect's ErrorWriter.
func (s *Server) limitCalls(h http.Handler) http.Handler {
	refuse := connect.NewErrorWriter(s.handlerOptions()...)
	return admission.LimitCalls(h, s.calls, isStreamProcedure, func(w http.ResponseWriter, r *http.Request, why admission.CallRefusal) {
		_ = refuse.Write(w, r, s.callRefused(why))
	})
}

// callRefused counts a call refused by its client's share of calls in
// progress, and returns its answer (resource_exhausted naming the share).
func (s *Server) callRefused(why admission.CallRefusal) error {
	quota, of, limit := "max-calls-per-client", "client address", s.cfg.MaxCallsPerClient
	if why.Network {
		quota, of, limit = "max-calls-per-network", "client network", s.cfg.MaxCallsPerClient*s.cfg.NetworkShare
	}
	s.metrics.Refused(quota)
	return apierr.Connect(&apierr.QuotaError{Quota: quota, Of: of, Owner: why.Client, Used: why.Used, Limit: limit})
}

// admitStreamCall admits one call a Session stream carries as limitCalls
// and takeTurns admit a unary call: within its client's shares of calls in
// progress, then once it has a place among MaxCallsInProgress.
func (s *Server) admitStreamCall(ctx context.Context) (context.Context, func(), error) {
	callCtx, leave, why, err := s.calls.EnterCall(ctx)
	if why != nil {
		return nil, nil, s.callRefused(*why)
	}
	if err != nil {
		return nil, nil, apierr.Connect(err)
	}
	return callCtx, leave, nil
}

// takeTurns lets a unary call be worked on once its body has arrived and
// it has a place among Config.MaxCallsInProgress, given in turns by client
// network (admission.TakeTurns).
func (s *Server) takeTurns(h http.Handler) http.Handler {
	return admission.TakeTurns(h, s.calls, isStreamProcedure)
}
