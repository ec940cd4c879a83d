package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// Lease is a held lease that renews itself until released or lost.
// Its methods are safe for concurrent use.
type Lease struct {
	c        *Client
	info     Info
	interval time.Duration
	// window is how long after a successful request was sent the local
	// deadline falls: the TTL less the drift margin (Config.window).
	window time.Duration

	ctx    context.Context
	cancel context.CancelCauseFunc

	mu       sync.Mutex
	deadline time.Time   // local conservative deadline
	expiry   *time.Timer // fires at deadline; nil until start
	renewal  *time.Timer // fires when the next renewal is due and sends it; nil until start
	stopped  bool
	sig      string // latest token signature; guarded by mu

	seq atomic.Uint64 // the last sequence NextSequence handed out
}

func newLease(c *Client, info Info, interval, window time.Duration) *Lease {
	ctx, cancel := context.WithCancelCause(context.Background())
	c.renewals.hold() // dropped by halt
	return &Lease{c: c, info: info, interval: interval, window: window, ctx: ctx, cancel: cancel}
}

// start sets the local deadline to sent plus the window, arms the timer
// that loses the lease when it passes, and starts renewing. sent is when
// the last request that proved the lease current (the Acquire or a
// renewal) was sent.
func (l *Lease) start(sent time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.deadline = sent.Add(l.window)
	// The timer may fire at once (a slow answer); deadlinePassed takes mu,
	// so it waits until expiry is set.
	l.expiry = l.c.bg.afterFunc(time.Until(l.deadline), l.deadlinePassed)
	// No goroutine waits between renewals: the timer starts one for each.
	l.renewal = l.c.bg.afterFunc(l.jittered(), l.renewDue)
}

// Key returns the leased key, which is also the fencing scope.
func (l *Lease) Key() string { return l.info.Key }

// Token returns the fencing token to present with every write.
func (l *Lease) Token() uint64 { return l.info.Token }

// NextSequence returns the sequence for the next write under the lease's
// token: 1 on the first call, then 2, 3, ... (a Lease has one token for
// life; a new acquisition is a new Lease and starts at 1 again). Put it in
// the write's context with fence.WithSequence, or let fence.Retry or a
// fence.Sequenced lease do it; guards then refuse a second copy of the
// write as a duplicate (see docs/guard-spec.md, section 7).
func (l *Lease) NextSequence() uint64 { return l.seq.Add(1) }

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
// held until then unless MarkLost is called or a renewal is refused. It is the
// send time of the last successful renewal (or of the acquisition) plus
// the TTL less the drift margin; see Config.ClockDrift.
func (l *Lease) Deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

// MarkLost marks the lease as lost, for example after a resource rejected its
// token as stale. Its context is cancelled with a cause matching ErrLost and
// err. The lease stops renewing and is released in the background, as
// after every local loss (see lose); MarkLost does not wait for that.
func (l *Lease) MarkLost(err error) {
	if err == nil {
		err = errors.New("reported lost")
	}
	l.lose(err)
}

// Orphan stops renewing the lease and cancels its context (the cause
// matches ErrLost) without releasing it: the server keeps the lease until
// its TTL runs out. It is for handing the lease ID to another process, and
// for tests and benchmarks that stand in for a holder that stopped
// (paused, partitioned or crashed). Everyone else wants Release or MarkLost.
func (l *Lease) Orphan() {
	if l.halt() {
		l.cancel(fmt.Errorf("%w: %q token %d: orphaned, no longer renewed", ErrLost, l.info.Key, l.info.Token))
	}
}

// lose ends the lease locally with a cause matching ErrLost and err, then
// releases it in the background, once. The release is best effort: the
// server checks the lease ID, so it can never end a newer holder's lease,
// and when it gets through the key is free a TTL sooner than by expiry
// (the usual cause, a stale token, means another holder has it already;
// after a refused renewal the server answers not_found). It is bounded by
// Config.RequestTimeout and never blocks the caller.
func (l *Lease) lose(err error) {
	if !l.halt() {
		return
	}
	l.cancel(fmt.Errorf("%w: %q token %d: %w", ErrLost, l.info.Key, l.info.Token, err))
	l.c.bg.goFn(l.releaseLost)
}

func (l *Lease) releaseLost() {
	ctx, cancel := context.WithTimeout(context.Background(), l.c.cfg.RequestTimeout)
	defer cancel()
	_ = l.c.Release(ctx, l.info.Key, l.info.ID)
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
	if l.expiry != nil {
		l.c.bg.stop(l.expiry)
		l.c.bg.stop(l.renewal)
	}
	l.c.renewals.drop()
	l.c.bg.forget(l)
	return true
}

// Release gives the lease up. The context is cancelled before the request
// is sent, so no write races the release. ErrNotHeld means the lease had
// already ended on the server: it expired, someone released it by its ID,
// or, after a loss, the client's own background release got there first.
// A Release whose answer was lost and whose retry at another endpoint
// found the lease gone returns nil: released or expired, the lease is gone
// (see Client.Release).
func (l *Lease) Release(ctx context.Context) error {
	l.halt()
	l.cancel(ErrReleased)
	ctx, cancel := context.WithTimeout(ctx, l.c.cfg.RequestTimeout)
	defer cancel()
	return l.c.Release(ctx, l.info.Key, l.info.ID)
}

// renewOnce sends one renewal, bounded by Config.RequestTimeout, over the
// client's renewal stream or as a unary call (see renewstream.go), and
// returns when it was sent.
func (l *Lease) renewOnce(ctx context.Context) (sent time.Time, err error) {
	sent = time.Now()
	ctx, cancel := context.WithTimeout(ctx, l.c.cfg.RequestTimeout)
	defer cancel()
	l.mu.Lock()
	by := l.deadline // zero before start
	l.mu.Unlock()
	info, err := l.c.renew(ctx, by, l.info.Key, l.info.ID)
	if err == nil && info.Signature != "" {
		// After a key rotation the server signs with its new key.
		l.mu.Lock()
		l.sig = info.Signature
		l.mu.Unlock()
	}
	return sent, err
}

// renew renews once and, on success, moves the local deadline to the send
// time plus the window, but only if the lease is still live when the answer
// is applied. An answer applied after the deadline (the process was paused,
// or the deadline timer has not run yet) loses the lease instead: once the
// deadline has passed the lease is lost, and a lost lease never comes back,
// even in Deadline (docs/client-algorithm.md, section 1).
func (l *Lease) renew(ctx context.Context) error {
	sent, err := l.renewOnce(ctx)
	if err != nil {
		return err
	}
	l.mu.Lock()
	if l.stopped {
		l.mu.Unlock()
		return nil
	}
	if !l.c.now().Before(l.deadline) {
		l.mu.Unlock()
		// The lease is stopped by lose, so renewDue schedules no more.
		l.lose(errors.New("local deadline passed before a renewal's answer was applied"))
		return nil
	}
	if d := sent.Add(l.window); d.After(l.deadline) {
		l.deadline = d
		l.c.bg.reset(l.expiry, time.Until(d))
	}
	l.mu.Unlock()
	return nil
}

// renewDue sends the renewal that is due, then schedules the next: after
// the interval (jittered) when it succeeded, soon when it failed for a
// transport error, which is retried until the local deadline passes. A
// refused renewal loses the lease at once. Only one runs at a time: the
// timer is reset when it is done.
func (l *Lease) renewDue() {
	err := l.renew(l.ctx)
	var wait time.Duration
	switch {
	case err == nil:
		wait = l.jittered()
	case errors.Is(err, ErrNotHeld):
		l.lose(fmt.Errorf("renewal refused: %w", err))
		return
	default:
		wait = min(l.interval/4, 250*time.Millisecond)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.stopped {
		l.c.bg.reset(l.renewal, wait)
	}
}

func (l *Lease) jittered() time.Duration {
	j := time.Duration(rand.Int64N(int64(l.interval)/10 + 1))
	return l.interval - j
}
