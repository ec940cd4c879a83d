// Package fenceconnect enforces fencing tokens on Connect and gRPC services
// and attaches them on the client side.
//
// NewInterceptor is a handler-side connect.Interceptor: it reads the
// fencing-scope and fencing-token request headers (gRPC metadata, for gRPC
// and gRPC-Web clients), with the same rules as package fencehttp, and runs
// the handler inside fence.Guard.Do. NewClientInterceptor sends a lease's
// key and token on every call and calls Lease.MarkLost when a call comes back
// stale, which cancels the lease's context (invariant I7). Both halves carry
// the lease owner in the optional fencing-owner header, for the guard's
// observers (see fencehttp.HeaderOwner); it never changes a decision.
//
// Errors (NewError is the one place that maps them):
//
//	missing or malformed token or scope   invalid_argument
//	stale token                           failed_precondition + detail
//	guard failure                         unavailable
//
// The stale detail is a google.protobuf.Struct with the string fields
// "type" (fencehttp.ProblemStaleToken), "scope", "presentedToken" and
// "highestToken", tokens in decimal so that no double rounds them. Clients
// in any language can read it; StaleFromError decodes it in Go.
//
// Guarantees:
//   - A fenced call reaches the handler only if its token is at least the
//     highest accepted for its scope; while the handler runs, no other
//     fenced call of that scope is checked or handled (invariant I5, as far
//     as the guard provides it).
//   - The token is recorded only when the handler returns without error. A
//     handler's own error is returned unchanged.
//   - A stream is checked once, at its start, and holds its scope until the
//     handler returns; its token is recorded only if it returns nil. Every
//     effect of the stream is therefore fenced, not just the first.
//   - Equal tokens are accepted.
//   - The client interceptor never retries and returns every error to the
//     caller; it calls MarkLost for every stale unary call and once per stale
//     stream.
//
// Non-guarantees:
//   - The server trusts the client's fencing-scope; it cannot tell which
//     key a token was issued for.
//   - Every procedure is fenced unless InterceptorConfig.Procedures exempts it; an exempt
//     procedure that mutates is not fenced.
//   - A fenced stream blocks every other writer of its scope for as long as
//     it stays open. Long-lived streams that only read should be exempted.
//   - Messages a handler already sent, on a stream that then fails, were
//     delivered even though the token is not recorded.
//   - Scopes with non-ASCII characters travel fine over Connect and this
//     package's gRPC, but strict gRPC peers may refuse non-ASCII metadata.
//   - Calls are not stopped after MarkLost; use the lease's context for them.
package fenceconnect
