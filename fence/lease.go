package fence

import (
	"context"
	"errors"
)

// Lease is the holder's side of a lease, as the guards' lease-taking calls
// and the client transports see it: *client.Lease satisfies it, and so can
// any lease from another lock service that hands out fencing tokens.
//
// The guards take a Lease rather than a scope and a token so that a stale
// rejection reaches the lease itself (invariant I7): the caller cannot
// forget to give up its authority. The token-taking calls stay for callers
// without such a lease (a token read from a request header, say).
//
// Implementations must be safe for concurrent use. Lost may be called more
// than once (once per stale answer) and must be cheap and non-blocking; it
// is called on the goroutine that made the call.
type Lease interface {
	// Key returns the lease key, which is the fencing scope.
	Key() string
	// Token returns the fencing token of the lease.
	Token() uint64
	// Lost marks authority as lost and cancels the lease's context.
	Lost(err error)
}

// ReportStale calls l.Lost(err) if err is a stale-token rejection (it
// matches ErrStaleToken), and returns err unchanged. Every lease-taking call
// of the guards ends with it; use it after guards of your own.
func ReportStale(l Lease, err error) error {
	if err != nil && errors.Is(err, ErrStaleToken) {
		l.Lost(err)
	}
	return err
}

// DoLease runs g.Do with the lease's key as the scope and its token, and
// reports a stale rejection to the lease (see ReportStale). An error of
// apply that matches ErrStaleToken (a nested guard's rejection) is reported
// too.
func DoLease(ctx context.Context, g Guard, l Lease, apply func(ctx context.Context) error) error {
	return ReportStale(l, g.Do(LeaseContext(ctx, l), l.Key(), l.Token(), apply))
}

// DoLease is Do for a lease: the lease's key is the scope, its token the
// token, and a stale rejection calls l.Lost (see the package-level DoLease).
func (m *Memory) DoLease(ctx context.Context, l Lease, apply func(ctx context.Context) error) error {
	return DoLease(ctx, m, l, apply)
}
