package server

import (
	"context"
	"sync"

	"github.com/fencedio/fenced/lease"
	"github.com/fencedio/fenced/server/internal/apierr"
	"github.com/fencedio/fenced/server/internal/fsm"
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
	if s.sec.Policy() == nil {
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
	s.fsm.Read(func(st *lease.State) { ownerN, holderN = st.OwnerLen(owner), st.OwnerLen(holder) })
	if s.sec.Policy() != nil {
		if n := holderN + s.overrides.count(holder, limit-holderN, s.fsm); n >= limit {
			return &apierr.QuotaError{Quota: "max-leases-per-owner", Of: "principal", Owner: holder, Used: n, Limit: limit}
		}
	}
	if ownerN >= limit {
		return &apierr.QuotaError{Quota: "max-leases-per-owner", Of: "owner", Owner: owner, Used: ownerN, Limit: limit}
	}
	return nil
}

// ownerOverrides remembers, per principal, the leases this node granted it
// under another owner's name. Entries of leases that have ended are
// dropped whenever they could decide a refusal, and whenever a principal's
// entries have doubled since the last look, so that they stay within twice
// its current leases (plus a few).
type ownerOverrides struct {
	mu sync.Mutex
	by map[string]*overridden
}

type overridden struct {
	leases  map[string]string // key to lease ID
	pruneAt int               // look again once leases grows to this
}

// minPrune is the fewest entries worth a look at which have ended.
const minPrune = 64

// add records that principal holds lease id of key under another name.
func (o *ownerOverrides) add(principal, key, id string, f *fsm.FSM) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.by == nil {
		o.by = make(map[string]*overridden)
	}
	v := o.by[principal]
	if v == nil {
		v = &overridden{leases: make(map[string]string), pruneAt: minPrune}
		o.by[principal] = v
	}
	v.leases[key] = id
	if len(v.leases) >= v.pruneAt {
		o.prune(principal, v, f)
	}
}

// count returns how many current leases principal holds under other
// names. Once the remembered ones reach room, those no longer current are
// forgotten first, so that only current leases can refuse a grant.
func (o *ownerOverrides) count(principal string, room int, f *fsm.FSM) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	v := o.by[principal]
	if v == nil {
		return 0
	}
	if len(v.leases) >= room {
		o.prune(principal, v, f)
	}
	return len(v.leases)
}

// prune forgets principal's leases that are no longer current in f. The
// caller holds o.mu; nothing holds f's lock while it takes o.mu.
func (o *ownerOverrides) prune(principal string, v *overridden, f *fsm.FSM) {
	f.Read(func(st *lease.State) {
		for key, id := range v.leases {
			if _, err := st.Current(key, id); err != nil {
				delete(v.leases, key)
			}
		}
	})
	v.pruneAt = max(2*len(v.leases), minPrune)
	if len(v.leases) == 0 {
		delete(o.by, principal)
	}
}

// holderKind says what a quota holder is, for apierr.QuotaError.
func (s *Server) holderKind() string {
	if s.sec.Policy() != nil {
		return "principal"
	}
	return "owner"
}
