// Package fencehttp enforces fencing tokens on HTTP resources and attaches
// them on the client side, following fenced's pinned wire contract.
//
// On the server, Middleware checks every mutating request against a
// fence.Guard: the client sends its lease key in Fencing-Scope and its token
// in Fencing-Token, and the next handler runs inside Guard.Do, so a request
// with a token lower than one already accepted for its scope never reaches
// the handler. Answers that the middleware gives itself are RFC 9457 problem
// details (application/problem+json):
//
//	missing Fencing-Token                      428 Precondition Required
//	malformed token, missing/malformed scope   400 Bad Request
//	token above what the guard can store       400 Bad Request
//	(fence.ErrTokenOutOfRange, e.g. > 2^63-1
//	for the SQL guards)
//	token below the highest accepted           409 Conflict, with scope,
//	                                           presentedToken, highestToken
//	signature missing or wrong (signed guard,  403 Forbidden
//	see fence.NewSignedGuard)
//	guard failure                              503 Service Unavailable
//
// A token is canonical decimal, without leading zeros, in 1..2^64-1 (see
// ParseToken); a scope is a valid lease
// key: 1 to 512 bytes of printable UTF-8 (see fence.ValidateScope). Tokens in
// problem bodies are JSON numbers with the full uint64 range. FromHeader,
// ProblemFor and WriteProblem let other servers give identical answers.
//
// The handler reads the checked scope and token with ScopeFromContext and
// TokenFromContext instead of parsing the headers again.
//
// The optional Fencing-Owner header names the owner of the lease whose
// token the request carries (Transport sends it for leases that are
// fence.Owned). Middleware passes it to the guard (fence.WithOwner), so the
// guard's observers see whose write they judged; it never changes a
// decision, and an invalid one is ignored (OwnerFromHeader).
//
// # Which guard
//
// The guard decides what "atomic" covers; pick the one next to the data:
//
//   - data in PostgreSQL, MySQL/MariaDB or SQLite: fencesql.Guard.TxGuard.
//     The handler runs inside the guard's transaction; it writes through
//     fencesql.TxFromContext(r.Context()), so its writes and the new highest
//     token commit together, and a handler that fails (by default, 5xx)
//     rolls both back;
//   - data in the process's memory: fence.NewMemory;
//   - data elsewhere (files, another service): a durable guard that keeps
//     only the tokens, fencebolt.Open or fencesql.Guard.External; the check
//     serializes the handlers of a scope, but the handler's effect and the
//     token are not committed together (see their docs).
//
// On the client, Transport adds both headers from a Lease and calls
// Lease.MarkLost when a resource answers that the token is stale, which cancels
// the lease's context (invariant I7).
//
// Guarantees:
//   - A fenced request reaches the handler only if its token is at least the
//     highest accepted for its scope, and while the handler runs no other
//     fenced request of that scope is checked or handled (invariant I5, as
//     far as the guard provides it).
//   - Nothing reaches the handler, and no token is recorded, for a request
//     answered 400, 403, 428, 409 or 503 by the middleware.
//   - A handler whose final status counts as failed (by default >= 500), or
//     that panics, does not raise the highest token.
//   - Equal tokens are accepted: a holder writes many times with one token.
//   - Transport never retries, never modifies the caller's request, returns
//     every response it receives, and calls MarkLost for every stale answer.
//
// Non-guarantees:
//   - The server cannot tell whether a token was issued for the scope it is
//     presented with; it trusts the client's Fencing-Scope (or the mapping
//     given with Config.ScopeFunc). Scopes are independent (invariant I6) only
//     as long as clients name them truthfully.
//   - Safe methods (GET, HEAD, OPTIONS, TRACE) are neither checked nor
//     serialized with writes. A handler that mutates on GET is not fenced.
//   - The handler's answer goes to the client as it is written. If the guard
//     fails to record the token after the handler answered (possible with
//     guards that commit to a database), the client has seen success but
//     older tokens are not fenced by this write; the middleware logs it at
//     error level and can do nothing else.
//   - A handler that answers 4xx still records the token; one that answers
//     5xx may have changed the resource partly even though the token is not
//     recorded. Handlers should fail before they change anything.
//   - Handlers run while their scope is locked: a slow handler delays every
//     other writer of its scope, and streaming or hijacking an answer from a
//     mutating request keeps the scope locked until the handler returns.
//   - JavaScript clients reading highestToken with JSON.parse lose precision
//     above 2^53.
//   - Transport does not stop sending after MarkLost; use the lease's context
//     on requests for that.
package fencehttp
