// Package client is the Go client of fenced.
//
// [Client.Acquire] returns a [*Lease] that renews itself in the background
// and carries the fencing token to present to every resource the holder
// writes to:
//
//	l, err := c.Acquire(ctx, "orders/7")
//	...
//	defer l.Release(context.Background())
//	write(l.Context(), l.Token())
//
// A lease's [Lease.Context] is cancelled the moment the client can no
// longer be sure it holds the lease: a renewal was refused, the local
// deadline passed without a successful renewal, [Lease.MarkLost] was called
// (for example by a guard's transport after a stale-token rejection), the
// lease was released, or the client was closed. [context.Cause] of that
// context says which, and matches [ErrLost] unless the lease was released.
//
// After such a loss the client sends one Release with the lease's ID, in
// the background and bounded by Config.RequestTimeout. The server ends a
// lease only for its own ID, so this can never end a newer holder's lease,
// and when it gets through the key is free a TTL sooner than by expiry.
// [Lease.Orphan] is the exception: it stops renewing without releasing.
// [Client.Close] ends every lease the client still holds that way and
// returns once nothing the client started is left running.
//
// Against a server with security on, Config.TLS ([TLSFiles] builds one
// from PEM files) verifies the server and may present a client
// certificate, and Config.Token is sent as a bearer token on every call.
// Refusals match [ErrUnauthenticated] or [ErrPermissionDenied]. With token
// signing on, a lease's Signature goes with its token to guards that verify
// signatures.
//
// The invariants cited by number (I1 to I7) are defined in package
// [github.com/fencedio/fenced/lease].
//
// # Safety
//
// Guarantees:
//   - The local deadline is conservative. It is measured on this process's
//     monotonic clock from the moment the last successful renewal (or the
//     acquisition) was sent, and falls TTL×(1−ClockDrift) − DeadlineMargin
//     after it (by default 0.1% of the TTL and 10ms before the TTL is up;
//     see Config.ClockDrift). The server's deadline starts when it handles
//     the request, later, so the local one passes first while the two
//     clocks' rates differ by less than ClockDrift.
//   - A lease that Acquire returns is live. When the grant comes back late,
//     typically after waiting for a held key for longer than a TTL, the
//     deadline counted from the Acquire would be near or past, so Acquire
//     renews once before returning and counts from that renewal; if the
//     renewal fails, Acquire returns an error matching ErrLost.
//   - Once lost, a Lease never comes back: it does not re-acquire, and its
//     token must not be used again (invariant I7). Once the local deadline
//     has passed, no renewal moves it again: an answer applied after it
//     (the process was paused) loses the lease, even if it came in time.
//
// Non-guarantees:
//   - A lease does not stop a paused process from acting after its context
//     was cancelled: between the check of Context and the write, any amount
//     of time can pass. That is what fencing tokens and guards are for.
//   - An Acquire that fails with a timeout, a transport error or
//     ErrUnavailable (a leader that lost its leadership while writing the
//     grant cannot tell whether it was committed) may still have been
//     granted; the grant then expires after its TTL, and its token is
//     never seen by anyone. With several endpoints (Config.Endpoints) an
//     Acquire that got no answer is sent to the next node; if the first
//     attempt was granted unseen, the retry finds the key held by the
//     caller's own owner until that grant expires, and Acquire returns
//     ErrAcquireUncertain (*UncertainError), never ErrHeld: the caller may
//     hold the key, without its lease ID, until the TTL runs out. The
//     caller never holds two grants it knows of. Owners are not checked for
//     uniqueness, so another holder that uses the same owner string (the
//     default is per process) is reported the same way after such a retry.
//   - A Release that got no answer may have been applied. With several
//     endpoints it is sent to the next node, and if that node answers that
//     the lease is not current, Release returns nil, not ErrNotHeld: the
//     lease was released by the unanswered attempt or expired, and is gone
//     either way. ErrNotHeld means a node answered so and no earlier
//     attempt of the call can have ended the lease. With one endpoint such
//     a Release fails with ErrUnavailable; the lease, if it is still there,
//     expires after its TTL.
//   - The release after a loss is best effort: if it does not get through
//     (a partition, the usual reason a deadline passes), the server frees
//     the key when the lease expires.
//   - Clock rate: the local deadline assumes this machine's clock runs
//     slower than the server's by less than Config.ClockDrift. A clock
//     slewed faster than that (a daemon correcting a large offset by
//     slewing rather than stepping) needs a larger ClockDrift.
//
// # Cost
//
// Acquire, Renew and Release go over one Session stream per endpoint
// (HTTP/2), shared by every call and answered in any order: a message on an
// open stream instead of an HTTP request per call. The stream changes no
// call's meaning: a call cut with it after it was sent fails as a unary call
// cut after sending (ErrUnavailable, and ErrAcquireUncertain or a Release
// reported done after a retry at another endpoint), a call it never sent
// goes unary, and a grant that arrives for an Acquire whose context ended
// is released in the background. Config.DisableSession sends every call
// unary.
//
// A client's leases renew over one shared KeepAlive stream, each renewal
// sent when due (TTL/3 by default), pipelined with the others: one stream
// for the server instead of one request per renewal. No goroutine waits
// between renewals. With several endpoints the client finds the leader in
// the background and sends its calls there, sparing the followers' forwarding.
//
// # Compatibility
//
// Against a server or an HTTP client without HTTP/2, Session or KeepAlive,
// calls and renewals go as unary calls (the first call to an endpoint
// always does, while its stream is probed), and a server that does not
// answer /v1/role is used without looking for the leader: the same leases,
// at a higher cost.
// [Client.Watch] resumes on another endpoint after the last revision seen,
// as revisions are the same on every node.
package client
