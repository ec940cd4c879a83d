package election

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fencedio/fenced/client"
)

// ErrNoLeader is returned by Leader when nobody leads the election.
var ErrNoLeader = errors.New("election has no leader")

// Elections campaigns and observes elections through a fenced client. The
// client's Config.TTL is each leadership's TTL. It is safe for concurrent
// use.
type Elections struct {
	c *client.Client
	// wait is how long one acquisition waits in line; Campaign queues again
	// until its context ends.
	wait time.Duration
}

// New returns elections run through c.
func New(c *client.Client) *Elections {
	return &Elections{c: c, wait: 30 * time.Second}
}

// Leader is an election's leader as everyone can see it.
type Leader struct {
	// Value is what the leader published when it campaigned.
	Value string
	// Token is the leadership's fencing token: every leadership of a name
	// has a higher one than all before.
	Token uint64
}

// Leadership is a won election: the lease that makes its holder leader.
// Its methods are safe for concurrent use.
type Leadership struct {
	name  string
	lease *client.Lease
}

// Name returns the election's name, which is also the fencing scope.
func (l *Leadership) Name() string { return l.name }

// Value returns the value published with the leadership.
func (l *Leadership) Value() string { return l.lease.Owner() }

// Token returns the fencing token to present with every write.
func (l *Leadership) Token() uint64 { return l.lease.Token() }

// Context is cancelled when the leadership is lost or resigned.
func (l *Leadership) Context() context.Context { return l.lease.Context() }

// Done is closed when the leadership is lost or resigned.
func (l *Leadership) Done() <-chan struct{} { return l.lease.Done() }

// Err returns nil while leading, then why it ended: an error matching
// client.ErrLost, or client.ErrReleased after Resign.
func (l *Leadership) Err() error { return l.lease.Err() }

// Lease returns the lease behind the leadership, for what takes one (the
// fencehttp transport, fencectl's --exec).
func (l *Leadership) Lease() *client.Lease { return l.lease }

// Resign gives the leadership up, so that the next candidate in line is
// elected at once rather than after the TTL. The context is cancelled
// before the release is sent. A leadership that had already ended on the
// server (lost, expired) resigns without error.
func (l *Leadership) Resign(ctx context.Context) error {
	err := l.lease.Release(ctx)
	if errors.Is(err, client.ErrNotHeld) {
		return nil
	}
	return err
}

// Campaign waits until it is elected leader of name and returns the
// leadership, which renews itself until resigned or lost. value is
// published with it (at most 256 bytes, the limit of a lease's owner);
// empty means the client's owner (Config.Owner, by default hostname/pid).
//
// Campaign waits in line on the server, 30 seconds per request (a server
// whose --max-wait is shorter refuses it: client.ErrInvalid), and queues
// again while the election stays taken, the servers cannot be reached for
// a while (client.ErrUnavailable) or an earlier attempt of its own may hold
// the key (client.ErrAcquireUncertain: it waits that grant out). It returns
// when ctx ends, with an error matching ctx.Err(), or on any other error,
// invalid input included.
func (e *Elections) Campaign(ctx context.Context, name, value string) (*Leadership, error) {
	opts := []client.AcquireOption{client.WithWait(e.wait)}
	if value != "" {
		opts = append(opts, client.WithOwner(value))
	}
	for {
		l, err := e.c.Acquire(ctx, name, opts...)
		switch {
		case err == nil:
			return &Leadership{name: name, lease: l}, nil
		case ctx.Err() != nil:
			return nil, fmt.Errorf("campaign %q: %w", name, ctx.Err())
		case errors.Is(err, client.ErrHeld), errors.Is(err, client.ErrAcquireUncertain):
		case errors.Is(err, client.ErrUnavailable):
			// The cluster has no leader for longer than the client's
			// failover timeout; try again after a breath.
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("campaign %q: %w", name, ctx.Err())
			case <-time.After(time.Second):
			}
		default:
			return nil, fmt.Errorf("campaign %q: %w", name, err)
		}
	}
}

// Leader returns the current leader of name, or ErrNoLeader.
func (e *Elections) Leader(ctx context.Context, name string) (Leader, error) {
	got, err := e.c.Get(ctx, name)
	if err != nil {
		return Leader{}, err
	}
	info := got.Lease
	if info == nil {
		return Leader{}, fmt.Errorf("leader of %q: %w", name, ErrNoLeader)
	}
	return Leader{Value: info.Owner, Token: info.Token}, nil
}

// errResync asks Observe to read the state again.
var errResync = errors.New("resync")

// Observe calls fn with the current leader of name, if any, then with each
// new leader as it is elected, in order of their tokens, until ctx ends or
// fn returns an error, which Observe returns. It follows the election with
// Watch; when the server says events were missed, it reads the leader
// again, so fn sees the leader of that moment and may miss the ones in
// between.
func (e *Elections) Observe(ctx context.Context, name string, fn func(Leader) error) error {
	var last uint64
	report := func(i client.Info) error {
		if i.Key != name || i.Token <= last {
			return nil
		}
		last = i.Token
		return fn(Leader{Value: i.Owner, Token: i.Token})
	}
	for {
		// The election's key sorts first among the keys it prefixes.
		leases, rev, err := e.c.ListRevision(ctx, name, 1)
		if err != nil {
			return fmt.Errorf("observe %q: %w", name, err)
		}
		for _, l := range leases {
			if err := report(l); err != nil {
				return err
			}
		}
		err = e.c.Watch(ctx, name, rev, func(ev client.Event) error {
			switch ev.Type {
			case client.Resync:
				return errResync
			case client.Acquired:
				return report(ev.Lease)
			}
			return nil
		})
		switch {
		case errors.Is(err, errResync):
		case ctx.Err() != nil:
			return ctx.Err()
		case err == nil:
			return fmt.Errorf("observe %q: the server ended the watch", name)
		default:
			return err
		}
	}
}

// Callbacks are Run's hooks, in the shape of client-go's
// leaderelection.LeaderCallbacks. Each may be nil.
type Callbacks struct {
	// OnStartedLeading runs in its own goroutine once elected, with the
	// leadership and its context, cancelled when leadership ends.
	OnStartedLeading func(ctx context.Context, l *Leadership)
	// OnStoppedLeading runs after leadership ended and OnStartedLeading
	// returned. Unlike client-go's, it is not called if Run never led.
	OnStoppedLeading func()
	// OnNewLeader is called with the value of each new leader, this
	// candidate included (before OnStartedLeading), from the moment Run
	// starts until it returns; one call at a time, in order of election.
	OnNewLeader func(identity string)
}

// Run campaigns for name with value and, once elected, runs
// OnStartedLeading until the leadership ends: lost (the error matches
// client.ErrLost) or, when ctx ends, resigned (the error matches
// ctx.Err()). It waits for OnStartedLeading to return, then calls
// OnStoppedLeading and returns. It does not campaign again, as client-go's
// RunOrDie does not: call Run again for a new term.
func (e *Elections) Run(ctx context.Context, name, value string, cb Callbacks) error {
	// OnNewLeader hears of this candidate's own election from Run itself,
	// before OnStartedLeading, and of the others' from Observe; each
	// leader once, in token order.
	var (
		mu   sync.Mutex
		last uint64
	)
	newLeader := func(l Leader) {
		mu.Lock()
		defer mu.Unlock()
		if cb.OnNewLeader != nil && l.Token > last {
			last = l.Token
			cb.OnNewLeader(l.Value)
		}
	}
	if cb.OnNewLeader != nil {
		octx, stop := context.WithCancel(ctx)
		observed := make(chan struct{})
		defer func() { stop(); <-observed }()
		go func() {
			defer close(observed)
			_ = e.Observe(octx, name, func(l Leader) error { newLeader(l); return nil })
		}()
	}
	l, err := e.Campaign(ctx, name, value)
	if err != nil {
		return err
	}
	newLeader(Leader{Value: l.Value(), Token: l.Token()})
	worked := make(chan struct{})
	go func() {
		defer close(worked)
		if cb.OnStartedLeading != nil {
			cb.OnStartedLeading(l.Context(), l)
		}
	}()
	select {
	case <-l.Done():
		err = l.Err()
	case <-ctx.Done():
		err = ctx.Err()
		// Bounded by the client's RequestTimeout; on failure the lease
		// expires after its TTL.
		_ = l.Resign(context.Background())
	}
	<-worked
	if cb.OnStoppedLeading != nil {
		cb.OnStoppedLeading()
	}
	return fmt.Errorf("leadership of %q ended: %w", name, err)
}
