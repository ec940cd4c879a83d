package server

import (
	"context"

	"github.com/fencedio/fenced/lease"
	"github.com/fencedio/fenced/server/internal/api"
	"github.com/fencedio/fenced/server/internal/apierr"
)

// Quotas. MaxLeasesPerOwner and MaxWaitersPerOwner bound what one holder
// may take. Without auth the holder is the owner a request names. With auth
// on it is the principal: owner names are then the principal's own unless
// a rule grants it the owner permission, and a principal that may name any
// owner must not dodge its quota by naming a new one for every lease. So
// with auth on an acquisition counts against its principal (the leases
// recorded under the principal's name, plus those it acquired under other
// names) and against the owner it names; whichever is full refuses it with
// resource_exhausted, naming the quota and the principal or owner.
//
// Leases are recorded under their owner only; which principal acquired a
// lease under another owner's name is known to the node that granted it
// (admission.OwnerOverrides), not to the log. After a leader change such leases
// count against their owner alone until they end.

// quotaHolder is whom an acquisition by ctx's caller naming owner counts
// against: its principal with auth on, else the owner.
func (s *Server) quotaHolder(ctx context.Context, owner string) string {
	if s.sec.Policy() == nil {
		return owner
	}
	p, err := s.authz.Principal(ctx)
	if err != nil {
		return owner // refused before it gets here; nothing better to count
	}
	return p.Name
}

// checkLeaseQuota refuses an acquisition naming owner, on behalf of holder
// (quotaHolder), once either holds MaxLeasesPerOwner leases. Grants in
// flight are not counted, so concurrent acquisitions may overshoot by a
// few.
func (s *Server) checkLeaseQuota(owner, holder string) error {
	limit := s.cfg.MaxLeasesPerOwner
	var ownerN, holderN int
	s.fsm.Read(func(st *lease.State) { ownerN, holderN = st.OwnerLen(owner), st.OwnerLen(holder) })
	if s.sec.Policy() != nil {
		if n := holderN + s.overrides.Count(holder, limit-holderN, s.fsm.Read); n >= limit {
			return &apierr.QuotaError{Quota: "max-leases-per-owner", Of: "principal", Owner: holder, Used: n, Limit: limit}
		}
	}
	if ownerN >= limit {
		return &apierr.QuotaError{Quota: "max-leases-per-owner", Of: "owner", Owner: owner, Used: ownerN, Limit: limit}
	}
	return nil
}

// quotaRefusal is the answer to an acquisition of key by owner that a
// limit on the leases held (a quota, or max-leases-per-client) refused with
// err. When owner holds key, the lease that fills the limit may be this
// call's own grant: an earlier attempt's, whose answer a failover or a
// timeout cut. Refusing would report as failed an acquisition that may have
// succeeded, so the refusal is the lease's *lease.HeldError instead: "held"
// by the caller's own owner, which docs/protocol.md (section 3.8) defines
// as an unknown outcome for a caller that retries.
//
// err stands when the key is free or another owner's, and for a call that
// wrote grants itself (api.Proposals): ownGrant has already told its own
// grant apart, so a lease of the same owner is someone else's.
func (s *Server) quotaRefusal(ctx context.Context, key, owner string, err error) error {
	cur, ok := s.currentOf(key)
	if !ok || cur.Owner != owner || api.ProposalsOf(ctx).Any() {
		return err
	}
	return &lease.HeldError{Key: key, Owner: cur.Owner, Token: cur.Token, Remaining: s.remaining(key)}
}

// holderKind says what a quota holder is, for apierr.QuotaError.
func (s *Server) holderKind() string {
	if s.sec.Policy() != nil {
		return "principal"
	}
	return "owner"
}
