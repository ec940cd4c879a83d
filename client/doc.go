// Package client is the Go client of fenced.
//
// Acquire returns a *Lease that renews itself in the background and carries
// the fencing token to present to every resource the holder writes to:
//
//	l, err := c.Acquire(ctx, "orders/7")
//	...
//	defer l.Release(context.Background())
//	write(l.Context(), l.Token())
//
// A lease's Context is cancelled the moment the client can no longer be sure
// it holds the lease: a renewal was refused, the local deadline passed
// without a successful renewal, Lost was called (for example by a guard's
// transport after a stale-token rejection), or the lease was released.
// context.Cause of that context says which, and matches ErrLost unless the
// lease was released.
//
// Guarantees:
//   - The local deadline is conservative. It is measured on this process's
//     monotonic clock from the moment the last successful renewal (or the
//     acquisition) was sent, so it passes no later than the server's
//     deadline, which starts when the server handles the request.
//   - Once lost, a Lease never comes back: it does not re-acquire, and its
//     token must not be used again (invariant I7).
//
// Non-guarantees:
//   - A lease does not stop a paused process from acting after its context
//     was cancelled: between the check of Context and the write, any amount
//     of time can pass. That is what fencing tokens and guards are for.
//   - An Acquire that fails with a timeout or transport error may still have
//     been granted; the grant then expires after its TTL, and its token is
//     never seen by anyone. With several endpoints (Config.Endpoints) an
//     Acquire that got unavailable is sent to the next node; if the first
//     attempt was granted unseen, the retry finds the key held until that
//     grant expires. The caller never holds two grants it knows of.
//   - Clock rate: the local deadline assumes this machine's clock does not
//     run slower than the server's by more than the renewal margin.
package client
