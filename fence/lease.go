package fence

import (
	"context"
	"errors"
	"sync/atomic"
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
// Implementations must be safe for concurrent use. MarkLost may be called more
// than once (once per stale answer) and must be cheap and non-blocking; it
// is called on the goroutine that made the call.
type Lease interface {
	// Key returns the lease key, which is the fencing scope.
	Key() string
	// Token returns the fencing token of the lease.
	Token() uint64
	// MarkLost marks authority as lost and cancels the lease's context.
	MarkLost(err error)
}

// ReportStale calls l.MarkLost(err) if err is a stale-token rejection (it
// matches ErrStaleToken), and returns err unchanged. Every lease-taking call
// of the guards ends with it; use it after guards of your own.
func ReportStale(l Lease, err error) error {
	if err != nil && errors.Is(err, ErrStaleToken) {
		l.MarkLost(err)
	}
	return err
}

// Sequenced returns l numbering its writes: every lease-taking call of the
// guards (DoLease, fencebolt's DoTxLease, fencesql's DoLease and CheckLease,
// fenceredis's WithLease) and every request of the fencehttp and
// fenceconnect client halves made with it carries the next sequence of l
// (its NextSequence when l is a Sequencer, as *client.Lease is, a counter
// from 1 otherwise), unless the context already has one (WithSequence,
// Retry). Guards then refuse a copy of a write as a duplicate.
//
// Use it for one writer at a time: two calls in flight at once take
// sequences n and n+1, and if n+1 lands first, n is refused as a duplicate
// although it was never applied.
func Sequenced(l Lease) Lease {
	if s, ok := l.(*sequencedLease); ok {
		return s
	}
	return &sequencedLease{Lease: l}
}

type sequencedLease struct {
	Lease
	n atomic.Uint64 // when Lease is not a Sequencer
}

// NextSequence implements Sequencer.
func (s *sequencedLease) NextSequence() uint64 {
	if q, ok := s.Lease.(Sequencer); ok {
		return q.NextSequence()
	}
	return s.n.Add(1)
}

// Owner passes the inner lease's owner on (Owned).
func (s *sequencedLease) Owner() string {
	if o, ok := s.Lease.(Owned); ok {
		return o.Owner()
	}
	return ""
}

// Signature passes the inner lease's token signature on.
func (s *sequencedLease) Signature() string {
	if o, ok := s.Lease.(interface{ Signature() string }); ok {
		return o.Signature()
	}
	return ""
}

// SequenceContext returns ctx with the next sequence of l when l comes from
// Sequenced and ctx carries none; otherwise ctx. LeaseContext calls it; the
// client transports call it for each request.
func SequenceContext(ctx context.Context, l Lease) context.Context {
	if s, ok := l.(*sequencedLease); ok && SequenceFromContext(ctx) == 0 {
		return WithSequence(ctx, s.NextSequence())
	}
	return ctx
}

// DoLease runs g.Do with the lease's key as the scope and its token, and
// reports a stale rejection to the lease (see ReportStale). An error of
// apply that matches ErrStaleToken (a nested guard's rejection) is reported
// too.
func DoLease(ctx context.Context, g Guard, l Lease, apply func(ctx context.Context) error) error {
	return ReportStale(l, g.Do(LeaseContext(ctx, l), l.Key(), l.Token(), apply))
}

// DoLease is Do for a lease: the lease's key is the scope, its token the
// token, and a stale rejection calls l.MarkLost (see the package-level DoLease).
func (m *Memory) DoLease(ctx context.Context, l Lease, apply func(ctx context.Context) error) error {
	return DoLease(ctx, m, l, apply)
}
