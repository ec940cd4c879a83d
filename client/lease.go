package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// Lease is a held lease that renews itself until released or lost.
// Its methods are safe for concurrent use.
type Lease struct {
	c        *Client
	info     Info
	interval time.Duration

	ctx    context.Context
	cancel context.CancelCauseFunc

	mu       sync.Mutex
	deadline time.Time   // local conservative deadline
	expiry   *time.Timer // fires at deadline
	stop     chan struct{}
	stopped  bool
}

func newLease(c *Client, info Info, sent time.Time, interval time.Duration) *Lease {
	ctx, cancel := context.WithCancelCause(context.Background())
	l := &Lease{c: c, info: info, interval: interval, ctx: ctx, cancel: cancel, stop: make(chan struct{})}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.deadline = sent.Add(info.TTL)
	// The timer may fire at once (a slow answer); deadlinePassed takes mu,
	// so it waits until expiry is set.
	l.expiry = time.AfterFunc(time.Until(l.deadline), l.deadlinePassed)
	return l
}

// Key returns the leased key, which is also the fencing scope.
func (l *Lease) Key() string { return l.info.Key }

// Token returns the fencing token to present with every write.
func (l *Lease) Token() uint64 { return l.info.Token }

// ID returns the lease ID.
func (l *Lease) ID() string { return l.info.ID }

// Owner returns the owner name the lease was granted to.
func (l *Lease) Owner() string { return l.info.Owner }

// TTL returns the granted TTL.
func (l *Lease) TTL() time.Duration { return l.info.TTL }

// Context is cancelled when the lease is lost or released; its cause says
// which.
func (l *Lease) Context() context.Context { return l.ctx }

// Done is closed when the lease is lost or released.
func (l *Lease) Done() <-chan struct{} { return l.ctx.Done() }

// Err returns nil while the lease is held, then the cause of its end: an
// error matching ErrLost, or ErrReleased.
func (l *Lease) Err() error { return context.Cause(l.ctx) }

// Deadline returns the local conservative deadline: the lease is certainly
// held until then unless Lost is called or a renewal is refused.
func (l *Lease) Deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

// Lost marks the lease as lost, for example after a resource rejected its
// token as stale. Its context is cancelled with a cause matching ErrLost and
// err. The lease stops renewing; it is not released, since another holder
// may already own the key.
func (l *Lease) Lost(err error) {
	if err == nil {
		err = errors.New("reported lost")
	}
	l.lose(err)
}

func (l *Lease) lose(err error) {
	l.halt()
	l.cancel(fmt.Errorf("%w: %q token %d: %w", ErrLost, l.info.Key, l.info.Token, err))
}

func (l *Lease) deadlinePassed() {
	l.lose(errors.New("local deadline passed without a successful renewal"))
}

// halt stops renewals and the deadline timer; it reports whether this call
// stopped them.
func (l *Lease) halt() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return false
	}
	l.stopped = true
	close(l.stop)
	l.expiry.Stop()
	return true
}

// Release gives the lease up. The context is cancelled before the request
// is sent, so no write races the release. ErrNotHeld means the lease had
// already ended on the server.
func (l *Lease) Release(ctx context.Context) error {
	l.halt()
	l.cancel(ErrReleased)
	ctx, cancel := context.WithTimeout(ctx, l.c.cfg.RequestTimeout)
	defer cancel()
	return l.c.Release(ctx, l.info.Key, l.info.ID)
}

// renew renews once and, on success, moves the local deadline to the send
// time plus the TTL.
func (l *Lease) renew(ctx context.Context) error {
	sent := time.Now()
	ctx, cancel := context.WithTimeout(ctx, l.c.cfg.RequestTimeout)
	defer cancel()
	if _, err := l.c.Renew(ctx, l.info.Key, l.info.ID); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return nil
	}
	if d := sent.Add(l.info.TTL); d.After(l.deadline) {
		l.deadline = d
		l.expiry.Reset(time.Until(d))
	}
	return nil
}

// keepAlive renews every interval (jittered) until stopped. A refused
// renewal loses the lease at once; transport errors are retried quickly
// until the local deadline passes.
func (l *Lease) keepAlive() {
	wait := l.jittered()
	for {
		t := time.NewTimer(wait)
		select {
		case <-l.stop:
			t.Stop()
			return
		case <-t.C:
		}
		err := l.renew(l.ctx)
		switch {
		case err == nil:
			wait = l.jittered()
		case errors.Is(err, ErrNotHeld):
			l.lose(fmt.Errorf("renewal refused: %w", err))
			return
		default:
			wait = min(l.interval/4, 250*time.Millisecond)
		}
	}
}

func (l *Lease) jittered() time.Duration {
	j := time.Duration(rand.Int64N(int64(l.interval)/10 + 1))
	return l.interval - j
}
