// Package api is the lease API's Connect handlers (LeaseService, and the
// AdminService's Revoke): what each call checks, where it is served, and
// what it answers. The node mounts them (LeaseService, AdminService) and
// implements the narrow interfaces of Deps that they call: its lease
// operations, authorization, applied state, leadership, forwarding to the
// leader and metrics.
//
// Guarantees: input is validated (ValidateKey and the rest, the wire
// contract's rules) and bad input refused with invalid_argument before the
// node changes anything; every domain error reaches the caller through
// apierr.Connect. The lease ID, the capability that renews and releases a
// lease (invariant I4), goes only into the answers to its holder's
// Acquire, Renew and KeepAlive: WireLease gives every other answer the
// public view. Writes (Acquire, Renew, Release, KeepAlive's renewals,
// Revoke) and linearizable reads (Get, List) are served by the leader once
// it serves, after a leadership check for reads, and forwarded to it from
// other nodes; a call is forwarded at most once, and a call a node failed
// because it did not, or no longer, lead goes to the leader instead, up to
// 3 tries, an acquisition for what is left of its wait. KeepAlive answers
// its requests in order, renewing those read while earlier ones were
// renewed behind one confirmation. Session serves each Acquire, Renew and
// Release it carries through the unary method (so where and how it is
// served, its checks and its errors are the unary call's), each in its own
// goroutine, admitted as a unary call (Deps.AdmitCall), and answers each
// once, in the order they end; at most sessionAhead calls of a stream are
// in progress, and the stream is not read beyond them. Its end (the server
// shutting down, the client gone) ends the reading at once and cancels the
// calls in progress. Watch is served by every node from the
// transitions it applied; a watcher whose connection holds more than its
// bound unacknowledged (streamwrite) is sent RESYNC, last, and its stream
// ends.
//
// Not guaranteed: the outcome of a Session call whose answer the stream's
// end cut off (as a unary call's whose connection broke), nor that of a
// call answered "canceled": a call forwarded to the leader may have taken
// effect there when the cancel cut it off. A retried acquisition may have been granted by the try
// a leader change cut (unavailable with errMaybeGranted); the retry knows
// the grants the call wrote (Proposals), and answers so at once when one
// of them holds the key rather than wait behind it; stale reads
// (Fenced-Stale-Read) may miss recent transitions. Authentication, the
// HTTP limits and the mux are the node's.
package api
