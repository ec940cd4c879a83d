package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/fencedio/fenced/internal/failpoint"
	"github.com/fencedio/fenced/lease"
	"github.com/fencedio/fenced/server/internal/admission"
	"github.com/fencedio/fenced/server/internal/api"
	"github.com/fencedio/fenced/server/internal/apierr"
	"github.com/fencedio/fenced/server/internal/expiry"
	"github.com/fencedio/fenced/server/internal/waiters"
)

// Acquire grants key to owner for ttl or, with wait > 0, waits in line
// for it up to wait. The arguments are checked as the API checks them
// (key and owner as in the wire contract, ttl within MinTTL..MaxTTL, wait
// within 0..MaxWait): invalid input changes nothing.
//
// If ctx ends while the grant is being written, the outcome is uncertain
// (apierr.ErrUncertain, with ctx's error): the grant may still take effect, and
// the lease then expires after its TTL.
func (s *Server) Acquire(ctx context.Context, key, owner string, ttl, wait time.Duration) (lease.Lease, error) {
	holder := s.quotaHolder(ctx, owner)
	l, err := s.acquire(ctx, key, owner, ttl, wait, holder)
	if err == nil && l.Owner != holder {
		s.overrides.Add(holder, l.Key, l.ID, s.fsm.Read)
	}
	if err == nil {
		s.countClientLease(admission.ClientAddr(ctx), l)
	}
	return l, err
}

// countClientLease counts l, just granted, against the client address
// addr until it ends; a lease that has ended already counts against none.
func (s *Server) countClientLease(addr string, l lease.Lease) {
	if h := s.fsm.Held(l.Key, l.ID); h != nil {
		s.clientLeases.Add(addr, h, func() bool { return s.fsm.Held(h.Key, h.ID) == h })
	}
}

// acquire is Acquire counted against holder's quotas (quota.go).
func (s *Server) acquire(ctx context.Context, key, owner string, ttl, wait time.Duration, holder string) (lease.Lease, error) {
	if err := s.validateAcquire(key, owner, ttl, wait); err != nil {
		return lease.Lease{}, err
	}
	if err := s.ownGrant(ctx, key); err != nil {
		return lease.Lease{}, err
	}
	c := lease.Command{Op: lease.OpAcquire, Key: key, Owner: owner, TTL: ttl}
	if wait == 0 {
		return s.tryAcquire(ctx, c, holder)
	}

	if err := s.checkLeaseQuota(owner, holder); err != nil {
		return lease.Lease{}, s.quotaRefusal(ctx, key, owner, err)
	}
	addr := admission.ClientAddr(ctx)
	if err := s.checkClientLeases(addr); err != nil {
		return lease.Lease{}, s.quotaRefusal(ctx, key, owner, err)
	}
	caller := ctx
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	w, err := s.waiters.Enqueue(key, &c, waiters.Limits{Holder: holder, Of: s.holderKind(), Addr: addr, Network: s.calls.Networks.Of(addr),
		PerHolder: s.cfg.MaxWaitersPerOwner, PerAddr: s.cfg.MaxWaitersPerClient,
		PerNetwork: s.cfg.networkShare(s.cfg.MaxWaitersPerClient, s.cfg.MaxWaiters), Total: s.cfg.MaxWaiters})
	if err != nil {
		return lease.Lease{}, waitRefused(err)
	}
	defer s.waiters.Leave(key, w)
	// Each handover to w is a grant this call may have been given.
	defer func() { api.ProposalsOf(ctx).Add(s.waiters.Offered(w)...) }()
	var lastErr error = &lease.HeldError{Key: key}
	for {
		l, granted, head := s.waiters.NextStep(key, w)
		if granted {
			return l, nil
		}
		if s.waiters.MaybeGranted(w) {
			return s.giveUp(key, w, nil) // a handover to it may have been written
		}
		if head {
			// The caller's context, not the wait's: a grant being written
			// when waitMs ends is still this caller's.
			l, err := s.tryAcquire(caller, c, holder)
			if err == nil {
				return l, nil
			}
			if !errors.Is(err, lease.ErrHeld) && !errors.Is(err, apierr.ErrNotReady) {
				return s.giveUp(key, w, err)
			}
			lastErr = err
		}
		admission.ReleaseSlot(caller) // waiting in line is not work in progress
		select {
		case <-w.Ready():
		case <-ctx.Done():
			if err := caller.Err(); err != nil {
				// The caller's deadline (or cancellation) cut the wait, not
				// waitMs: answer with that (deadline_exceeded), never with
				// "held", so that the caller sees one error whether its own
				// timer or this answer comes first.
				return s.giveUp(key, w, err)
			}
			return s.giveUp(key, w, lastErr)
		}
	}
}

// ownGrant answers apierr.ErrMaybeGranted when key is held by a grant that
// ctx's call wrote in an earlier attempt (api.Proposals): the call went on
// after a leadership change, and that grant was committed after all. The
// call must not wait behind its own lease, which nobody renews: it would
// expire a TTL later and the key be granted to the same call again, one
// Acquire with two grants. A lease of the same owner under another ID is
// someone else's, and the call goes on as any other.
//
// Whether an earlier grant took effect is known only once this node serves:
// the Barrier of its term follows every entry of earlier terms, so each is
// applied by then or never will be. Until then the call is refused as not
// ready, which leaves its outcome open too.
func (s *Server) ownGrant(ctx context.Context, key string) error {
	p := api.ProposalsOf(ctx)
	if !p.Any() {
		return nil
	}
	if !s.Ready() {
		return apierr.ErrNotReady
	}
	if cur, ok := s.currentOf(key); ok && p.Made(cur.ID) {
		return apierr.ErrMaybeGranted
	}
	return nil
}

// giveUp leaves the line with err, unless the key was handed to the waiter
// meanwhile: then the grant stands and is returned. A handover to it that
// is still being applied is waited for, however long the wait was meant to
// be: the grant it may make is this waiter's, and nobody else learns its
// lease ID.
func (s *Server) giveUp(key string, w *waiters.Waiter, err error) (lease.Lease, error) {
	for {
		l, granted, inFlight := s.waiters.Abandon(key, w)
		if granted {
			return l, nil
		}
		if !inFlight {
			break
		}
		<-w.Ready() // Settle signals once the handover is decided
	}
	if s.waiters.MaybeGranted(w) {
		// A handover to this call failed with its outcome unknown and may
		// yet be committed: "held" or any other failure would hide a grant.
		return lease.Lease{}, fmt.Errorf("a handover to this acquisition may have been written when the leader changed: %w", apierr.ErrMaybeGranted)
	}
	if errors.Is(err, lease.ErrHeld) {
		err = s.refreshHeld(key, err)
	}
	return lease.Lease{}, err
}

// waitRefused is the node's error for a refusal of the wait queues: an
// apierr.QuotaError for the limit of a holder or client address,
// apierr.ErrTooManyWaiters for max-waiters.
func waitRefused(err error) error {
	var le *waiters.LimitError
	if !errors.As(err, &le) {
		return err
	}
	if le.Limit == "max-waiters" {
		return fmt.Errorf("%w: %d acquisitions wait on this server (limit max-waiters %d)", apierr.ErrTooManyWaiters, le.Used, le.Max)
	}
	return &apierr.QuotaError{Quota: le.Limit, Of: le.Of, Owner: le.Holder, Used: le.Used, Limit: le.Max}
}

// tryAcquire grants c.Key if it is free. If ctx ends while the grant is
// being written, the grant may still take effect (apierr.ErrUncertain).
func (s *Server) tryAcquire(ctx context.Context, c lease.Command, holder string) (lease.Lease, error) {
	if !s.Ready() {
		return lease.Lease{}, apierr.ErrNotReady
	}
	var (
		cur   lease.Lease
		held  bool
		count int
		bytes int64
	)
	term := s.readyTerm.Load()
	s.fsm.Read(func(st *lease.State) {
		cur, held = st.Get(c.Key)
		count, bytes = st.Len(), st.Bytes()
	})
	if held && failpoint.Enabled(failpoint.GrantHeld) && failpoint.OneIn(16) {
		_, _ = s.apply(ctx, lease.Command{Op: lease.OpExpire, Key: cur.Key, ID: cur.ID})
		held = false
	}
	if held && api.ProposalsOf(ctx).Made(cur.ID) {
		return lease.Lease{}, apierr.ErrMaybeGranted // ownGrant, for a grant applied since
	}
	if held {
		// A refusal is a read: answered only once this node confirms it
		// still led when the state was read, so that a deposed leader
		// that does not know it yet never reports a holder a newer
		// leader has already replaced.
		if err := s.confirmTerm(ctx, term); err != nil {
			return lease.Lease{}, err
		}
		return lease.Lease{}, &lease.HeldError{Key: cur.Key, Owner: cur.Owner, Token: cur.Token,
			Remaining: s.remaining(cur.Key)}
	}
	if count >= s.cfg.MaxLeases {
		return lease.Lease{}, fmt.Errorf("%w: the server holds %d leases (limit %d)", apierr.ErrTooManyLeases, count, s.cfg.MaxLeases)
	}
	if cost := lease.Cost(c.Key, c.Owner); bytes+cost > s.cfg.MaxLeaseBytes {
		return lease.Lease{}, fmt.Errorf("%w: the server's leases count %d bytes, this one %d more (limit max-lease-bytes %d)",
			apierr.ErrTooManyLeaseBytes, bytes, cost, s.cfg.MaxLeaseBytes)
	}
	if err := s.checkLeaseQuota(c.Owner, holder); err != nil {
		return lease.Lease{}, err
	}
	if err := s.checkClientLeases(admission.ClientAddr(ctx)); err != nil {
		return lease.Lease{}, err
	}
	c.ID = newLeaseID()
	api.ProposalsOf(ctx).Add(c.ID)
	res, err := s.apply(ctx, c)
	if err != nil {
		return lease.Lease{}, err
	}
	if res.Err != nil {
		return lease.Lease{}, s.refreshHeld(c.Key, res.Err)
	}
	return res.Event.Lease, nil
}

// refreshHeld fills in the remaining TTL of a held error.
func (s *Server) refreshHeld(key string, err error) error {
	var held *lease.HeldError
	if errors.As(err, &held) {
		var cur lease.Lease
		var ok bool
		s.fsm.Read(func(st *lease.State) { cur, ok = st.Get(key) })
		if ok {
			return &lease.HeldError{Key: key, Owner: cur.Owner, Token: cur.Token, Remaining: s.remaining(key)}
		}
	}
	return err
}

// Renew extends lease id of key by its TTL. It is not written to the log:
// the leader confirms it still leads, then moves the deadline.
func (s *Server) Renew(ctx context.Context, key, id string) (lease.Lease, error) {
	b := [1]api.Renewal{{Key: key, ID: id}}
	s.renewBatch(ctx, b[:])
	return b[0].Lease, b[0].Err
}

// renewBatch makes the renewals of b that have no error yet, behind one
// leadership confirmation. Every renewal of b has arrived when it is
// called, so the confirmation, which starts after the call, covers each
// of them as if it had been confirmed alone.
func (s *Server) renewBatch(ctx context.Context, b []api.Renewal) {
	pending := 0
	for i := range b {
		r := &b[i]
		if r.Err == nil {
			r.Err = api.ValidateKey(r.Key)
		}
		if r.Err == nil {
			r.Err = api.ValidateID(r.ID)
		}
		if r.Err == nil {
			pending++
		}
	}
	if pending == 0 {
		return
	}
	term := s.readyTerm.Load()
	start := s.expirer.Now()
	if err := s.confirmRenewals(ctx, term); err != nil {
		for i := range b {
			if b[i].Err == nil {
				b[i].Err = err
			}
		}
		return
	}
	// The records of the keys' current leases, which hold their deadlines.
	var one [1]*lease.Held
	held := one[:0]
	if len(b) > len(one) {
		held = make([]*lease.Held, 0, len(b))
	}
	s.fsm.Read(func(st *lease.State) {
		for i := range b {
			var h *lease.Held
			if b[i].Err == nil {
				h = st.Held(b[i].Key)
			}
			held = append(held, h)
		}
	})
	debug := s.log.Enabled(ctx, slog.LevelDebug)
	for i := range b {
		r := &b[i]
		if r.Err != nil {
			continue
		}
		// The deadline counts from before the leadership check: a renewal
		// never outlives what the confirmed leadership covers. It counts
		// only in the term confirmed.
		l, err := s.expirer.Renew(held[i], r.ID, start, term)
		if errors.Is(err, expiry.ErrOtherTerm) {
			err = apierr.ErrNotReady
		}
		if err != nil {
			r.Err = apierr.DescribeNotHeld(err, r.Key, r.ID)
			continue
		}
		r.Lease = l
		if debug {
			s.log.Debug("lease renewed", "scope", l.Key, "owner", l.Owner, "lease_id", idFingerprint(l.ID), "token", l.Token)
		}
	}
}

// confirmRenewals confirms that this node still leads in term, after the
// renewals arrived (confirmTerm).
func (s *Server) confirmRenewals(ctx context.Context, term uint64) error {
	if failpoint.Enabled(failpoint.DeposedLeaderRenews) && s.everLed.Load() {
		// The mutant: a node that once led renews without asking whether
		// it still leads.
		return nil
	}
	if failpoint.Enabled(failpoint.RenewWithoutQuorumContact) {
		// The mutant: the term as this node knows it, no quorum contact.
		if term == 0 || s.currentTerm() != term {
			return apierr.ErrNotReady
		}
		return nil
	}
	return s.confirmTerm(ctx, term)
}

// Release ends lease id of key.
func (s *Server) Release(ctx context.Context, key, id string) error {
	if err := api.ValidateKey(key); err != nil {
		return err
	}
	if err := api.ValidateID(id); err != nil {
		return err
	}
	if !s.Ready() {
		return apierr.ErrNotReady
	}
	var err error
	term := s.readyTerm.Load()
	s.fsm.Read(func(st *lease.State) { _, err = st.Current(key, id) })
	if failpoint.Enabled(failpoint.ReleaseAnyID) {
		s.fsm.Read(func(st *lease.State) {
			if cur, ok := st.Get(key); ok {
				id, err = cur.ID, nil
			}
		})
	}
	if err != nil {
		// Like a refusal to acquire, "not held" is a read (tryAcquire).
		if cerr := s.confirmTerm(ctx, term); cerr != nil {
			return cerr
		}
		return apierr.DescribeNotHeld(err, key, id)
	}
	res, err := s.applyHandover(ctx, lease.Command{Op: lease.OpRelease, Key: key, ID: id})
	if err != nil {
		return err
	}
	return apierr.DescribeNotHeld(res.Err, key, id)
}

// Revoke ends the current lease of key on behalf of principal by, whoever
// holds it, and returns it. The end is a log entry naming by; like a
// release it hands the key to its first waiter, if any, in the same entry,
// and the holder's next renewal finds its lease gone. lease.ErrNotHeld when
// key is free.
func (s *Server) Revoke(ctx context.Context, key, by string) (lease.Lease, error) {
	if err := api.ValidateKey(key); err != nil {
		return lease.Lease{}, err
	}
	if !s.Ready() {
		return lease.Lease{}, apierr.ErrNotReady
	}
	cur, ok := s.currentOf(key)
	if !ok {
		return lease.Lease{}, &freeKeyError{key: key}
	}
	// The command names the lease seen here: should it end meanwhile, the
	// revocation changes nothing rather than ending its successor.
	res, err := s.applyHandover(ctx, lease.Command{Op: lease.OpRevoke, Key: key, ID: cur.ID, By: by})
	if err != nil {
		return lease.Lease{}, err
	}
	if res.Err != nil {
		return lease.Lease{}, &freeKeyError{key: key}
	}
	return res.Event.Lease, nil
}

// remaining returns how long the current lease of key has left by this
// node's deadlines, 0 if it has none or the deadline is not tracked.
func (s *Server) remaining(key string) time.Duration { return s.remainingAt(key, s.expirer.Now()) }

// remainingAt is remaining as of now.
func (s *Server) remainingAt(key string, now time.Time) time.Duration {
	var h *lease.Held
	s.fsm.Read(func(st *lease.State) { h = st.Held(key) })
	return s.expirer.Remaining(h, now)
}

// listRemaining returns up to limit leases of view whose keys start with
// prefix, in key order (lease.View.List), and how long each has left.
func (s *Server) listRemaining(view lease.View, prefix string, limit int) ([]lease.Lease, []time.Duration) {
	held := view.ListHeld(prefix, limit)
	leases := make([]lease.Lease, len(held))
	for i, h := range held {
		leases[i] = h.Lease
	}
	return leases, s.expirer.RemainingOf(held, s.expirer.Now())
}

func (s *Server) currentOf(key string) (lease.Lease, bool) {
	var (
		l  lease.Lease
		ok bool
	)
	s.fsm.Read(func(st *lease.State) { l, ok = st.Get(key) })
	return l, ok
}

// freeKeyError is a Revoke of a key nobody holds; it matches
// lease.ErrNotHeld.
type freeKeyError struct{ key string }

func (e *freeKeyError) Error() string { return fmt.Sprintf("key %q has no current lease", e.key) }

func (e *freeKeyError) Is(err error) bool { return err == lease.ErrNotHeld }
