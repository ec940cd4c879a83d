package server

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/fencedio/fenced/lease"
	"github.com/fencedio/fenced/server/internal/apierr"
	"github.com/fencedio/fenced/server/internal/rejections"
	"github.com/fencedio/fenced/server/internal/waiters"
	"github.com/hashicorp/raft"
)

// appliedBatch hands on the transitions of one applied batch in log order,
// their records gathered into one write (Config.LogOutput).
func (s *Server) appliedBatch(events []lease.Event) {
	s.cfg.LogOutput.Gather()
	defer s.cfg.LogOutput.Flush()
	for _, ev := range events {
		s.applied(ev)
	}
}

// applied sees every transition, in log order, on every node. Transitions
// replayed from the log on start update the state kept beside the FSM but
// are not logged or counted again.
func (s *Server) applied(ev lease.Event) {
	l := ev.Lease
	replay := ev.Revision <= s.replayedTo
	switch ev.Type {
	case lease.Acquired:
		s.expirer.Add(ev.Held(), s.expirer.Now())
		s.grants.Record(ev, rejections.GrantTime(replay))
		s.waiters.Granted(l)
		prev, tookOver := s.expired.take(l.Key)
		if replay {
			break
		}
		s.counts.Acquired.Add(1)
		if tookOver {
			s.counts.Takeovers.Add(1)
			s.logTransition("lease taken over", l, slog.String("previous_owner", prev.Owner), slog.Uint64("previous_token", prev.Token))
		} else {
			s.logTransition("lease acquired", l, slog.Duration("ttl", l.TTL))
		}
	case lease.Released:
		s.clientLeases.Ended(ev.Held())
		s.expirer.Remove(ev.Held())
		s.expired.take(l.Key)
		s.waiters.Freed(l.Key)
		if !replay {
			s.counts.Released.Add(1)
			if ev.By != "" {
				s.logTransition("lease revoked", l, slog.String("by", ev.By))
			} else {
				s.logTransition("lease released", l)
			}
		}
	case lease.Expired:
		s.clientLeases.Ended(ev.Held())
		s.expirer.Remove(ev.Held())
		s.expired.put(l)
		s.waiters.Freed(l.Key)
		if !replay {
			s.counts.Expired.Add(1)
			s.logTransition("lease expired", l)
		}
	}
	s.hub.Publish(ev)
}

// logTransition logs a transition of l at info level: the fields every
// transition record has, then extra. Typed attributes spare the apply path
// (the FSM goroutine, which answers nobody until it is done) an allocation
// per field.
func (s *Server) logTransition(msg string, l lease.Lease, extra ...slog.Attr) {
	ctx := context.Background()
	if !s.log.Enabled(ctx, slog.LevelInfo) {
		return
	}
	var attrs [6]slog.Attr
	b := append(attrs[:0], slog.String("scope", l.Key), slog.String("owner", l.Owner),
		slog.String("lease_id", idFingerprint(l.ID)), slog.Uint64("token", l.Token))
	s.log.LogAttrs(ctx, slog.LevelInfo, msg, append(b, extra...)...)
}

func (s *Server) restored(st *lease.State) {
	s.resetDeadlines(st)
	s.hub.Restored(st.Applied())
	s.clientLeases.Reset()
	s.waiters.FreedAll()
}

// resetDeadlines gives every current lease of st a full TTL from now and
// returns how many there are.
func (s *Server) resetDeadlines(st *lease.State) int {
	held := make([]*lease.Held, 0, st.Len())
	st.EachHeld(func(h *lease.Held) bool { held = append(held, h); return true })
	s.expirer.Reset(held, s.expirer.Now())
	return len(held)
}

// expireLeases writes the expiry of due, decided by the leader of term, to
// the log and returns once it is applied or has failed. Leases whose key has
// a waiter are handed over to it, each in an entry of its own so that every
// grant has a token of its own; the rest share one entry. If leadership is
// lost meanwhile, the next leader tracks the leases anew.
func (s *Server) expireLeases(term uint64, due []lease.Lease) {
	type handover struct {
		key  string
		w    *waiters.Waiter
		wait func() (lease.Result, error)
	}
	var (
		handovers []handover
		plain     = make([]lease.Expiry, 0, len(due))
	)
	for _, l := range due {
		e := lease.Expiry{Key: l.Key, ID: l.ID}
		w := s.waiters.Claim(l.Key)
		if w == nil {
			plain = append(plain, e)
			continue
		}
		e.NextID, e.Owner, e.TTL = w.NextID(), w.Want().Owner, w.Want().TTL
		c := lease.Command{Op: lease.OpExpireBatch, Term: term, Expiries: []lease.Expiry{e}}
		handovers = append(handovers, handover{l.Key, w, s.applyAsync(s.ctx, c)})
	}
	if len(plain) > 0 {
		res, err := s.await(s.ctx, s.applyAsync(s.ctx, lease.Command{Op: lease.OpExpireBatch, Term: term, Expiries: plain}))
		if err == nil {
			err = res.Err
		}
		if err != nil {
			s.log.Warn("expiry not applied", "leases", len(plain), "term", term, "err", err)
		}
	}
	for _, h := range handovers {
		res, err := s.await(s.ctx, h.wait)
		unknown := outcomeUnknown(err) // a refusal by the state machine is an outcome
		if err == nil {
			err = res.Err
		}
		var next lease.Event
		if err == nil && len(res.Items) == 1 {
			next = res.Items[0].Next
		}
		s.waiters.Settle(h.key, h.w, next.Lease, next.Type == lease.Acquired, unknown)
		if err != nil {
			s.log.Warn("expiry not applied", "scope", h.key, "term", term, "err", err)
		}
	}
}

// outcomeUnknown reports whether an entry whose apply failed with err may
// still be committed: every error but those that say it was never written.
func outcomeUnknown(err error) bool {
	return err != nil && !errors.Is(err, apierr.ErrNotReady) && !errors.Is(err, raft.ErrNotLeader) &&
		!errors.Is(err, raft.ErrEnqueueTimeout) && !errors.Is(err, raft.ErrLeadershipTransferInProgress)
}

// applyHandover applies a release c, and hands the key over in the same log
// entry to the first waiter for it, if any. The waiter learns the outcome
// when it is known, also if ctx ends before: the grant may be its.
func (s *Server) applyHandover(ctx context.Context, c lease.Command) (lease.Result, error) {
	w := s.waiters.Claim(c.Key)
	if w == nil {
		return s.apply(ctx, c)
	}
	c.NextID, c.Owner, c.TTL = w.NextID(), w.Want().Owner, w.Want().TTL
	wait := func() (lease.Result, error) { return lease.Result{}, apierr.ErrNotReady }
	if s.Ready() {
		wait = s.applyAsync(ctx, c)
	}
	return s.await(ctx, func() (lease.Result, error) {
		res, err := wait()
		s.waiters.Settle(c.Key, w, res.Next.Lease, err == nil && res.Next.Type == lease.Acquired, outcomeUnknown(err))
		return res, err
	})
}

// apply writes c to the log and returns its result once applied, which
// implies committed and fsynced. If ctx ends first the outcome is uncertain
// (apierr.ErrUncertain, see await).
func (s *Server) apply(ctx context.Context, c lease.Command) (lease.Result, error) {
	if !s.Ready() {
		return lease.Result{}, apierr.ErrNotReady
	}
	return s.applyAlways(ctx, c)
}

// applyAlways is apply without the readiness check, for the leader's own
// expiries, which raft refuses anyway if this node no longer leads.
func (s *Server) applyAlways(ctx context.Context, c lease.Command) (lease.Result, error) {
	return s.await(ctx, s.applyAsync(ctx, c))
}

// applyAsync writes c to the log without the readiness check and returns a
// function that waits for its result, so that one goroutine can have several
// entries in flight. An entry that cannot be queued before ctx's deadline
// is not written (raft.ErrEnqueueTimeout); one that was queued is written
// whatever happens to ctx.
func (s *Server) applyAsync(ctx context.Context, c lease.Command) func() (lease.Result, error) {
	data, err := c.MarshalBinary()
	if err != nil {
		return func() (lease.Result, error) { return lease.Result{}, err }
	}
	var timeout time.Duration // raft's: 0 waits for the queue as long as it takes
	d, hasDeadline := ctx.Deadline()
	if hasDeadline {
		timeout = time.Until(d)
	}
	if err := ctx.Err(); err != nil || (hasDeadline && timeout <= 0) {
		err = cmp.Or(err, context.DeadlineExceeded)
		return func() (lease.Result, error) { return lease.Result{}, err }
	}
	start := time.Now()
	if s.applyPending.Add(1) == 1 {
		s.applyProgress.Store(start.UnixNano()) // idle until now: not a stall
	}
	f := s.raft.Apply(data, timeout)
	outcome := f.Error
	if s.cfg.applyLost != nil {
		if err := s.cfg.applyLost(c); err != nil {
			outcome = func() error { return err }
		}
	}
	var once sync.Once
	return func() (lease.Result, error) {
		err := outcome()
		once.Do(func() { s.applyPending.Add(-1) })
		if err != nil {
			return lease.Result{}, err
		}
		s.metrics.ObserveApply(time.Since(start))
		return f.Response().(lease.Result), nil
	}
}

// await waits for the answer of an apply started by applyAsync, or until
// ctx ends. An apply given up on this way may still be committed: the
// answer is apierr.ErrUncertain with ctx's cause, never "not applied". A call whose
// ctx ended because the node is closing waits on, until raft has shut down:
// Close drains the API before it stops raft, so writes in flight get their
// outcome. (raft never answers an apply still queued in its buffered apply
// channel when it shuts down; raftDown ends the wait for those.)
func (s *Server) await(ctx context.Context, wait func() (lease.Result, error)) (lease.Result, error) {
	type answer struct {
		res lease.Result
		err error
	}
	c := make(chan answer, 1)
	// Not tracked by wg, the one goroutine of the node that is not: raft
	// never answers an apply still queued when it shut down, and Close
	// would wait for this one forever. Otherwise it ends with the answer.
	go func() {
		res, err := wait()
		c <- answer{res, err}
	}()
	select {
	case a := <-c:
		return a.res, a.err
	case <-ctx.Done():
	}
	cause := context.Cause(ctx)
	if errors.Is(cause, apierr.ErrClosed) {
		select {
		case a := <-c:
			return a.res, a.err
		case <-s.raftDown:
		}
	}
	return lease.Result{}, fmt.Errorf("%w: %w", apierr.ErrUncertain, cause)
}

func newLeaseID() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
