package server

import (
	"context"
	"sync"

	"github.com/fencedio/fenced/lease"
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
// (ownerOverrides), not to the log. After a leader change such leases
// count against their owner alone until they end.

// quotaHolder is whom an acquisition by ctx's caller naming owner counts
// against: its principal with auth on, else the owner.
func (s *Server) quotaHolder(ctx context.Context, owner string) string {
	if s.sec.policy() == nil {
		return owner
	}
	p, err := s.principal(ctx)
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
	s.fsm.read(func(st *lease.State) { ownerN, holderN = st.OwnerLen(owner), st.OwnerLen(holder) })
	if s.sec.policy() != nil {
		if n := holderN + s.overrides.count(holder, limit-holderN, s.fsm); n >= limit {
			return &quotaError{Quota: "max-leases-per-owner", Of: "principal", Owner: holder, Used: n, Limit: limit}
		}
	}
	if ownerN >= limit {
		return &quotaError{Quota: "max-leases-per-owner", Of: "owner", Owner: owner, Used: ownerN, Limit: limit}
	}
	return nil
}

// ownerOverrides remembers, per principal, the leases this node granted it
// under another owner's name: key to lease ID. Entries of leases that have
// ended are dropped when they could decide a refusal.
type ownerOverrides struct {
	mu sync.Mutex
	by map[string]map[string]string
}

// add records that principal holds lease id of key under another name.
func (o *ownerOverrides) add(principal, key, id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.by == nil {
		o.by = make(map[string]map[string]string)
	}
	m := o.by[principal]
	if m == nil {
		m = make(map[string]string)
		o.by[principal] = m
	}
	m[key] = id
}

// count returns how many current leases principal holds under other
// names. Once the remembered ones reach room, those no longer current in f
// are forgotten first, so that only current leases can refuse a grant.
func (o *ownerOverrides) count(principal string, room int, f *fsm) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	m := o.by[principal]
	if len(m) < room {
		return len(m)
	}
	f.read(func(st *lease.State) {
		for key, id := range m {
			if _, err := st.Current(key, id); err != nil {
				delete(m, key)
			}
		}
	})
	if len(m) == 0 {
		delete(o.by, principal)
	}
	return len(m)
}

// holderKind says what a quota holder is, for quotaError.
func (s *Server) holderKind() string {
	if s.sec.policy() != nil {
		return "principal"
	}
	return "owner"
}
