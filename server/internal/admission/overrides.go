package admission

import (
	"sync"

	"github.com/fencedio/fenced/lease"
)

// ReadState runs fn on the node's lease state, under its read lock
// (fsm.FSM.Read).
type ReadState func(fn func(*lease.State))

// OwnerOverrides remembers, per principal, the leases this node granted it
// under another owner's name. Entries of leases that have ended are
// dropped whenever they could decide a refusal, and whenever a principal's
// entries have doubled since the last look, so that they stay within twice
// its current leases (plus a few). The zero OwnerOverrides is ready to
// use.
type OwnerOverrides struct {
	mu sync.Mutex
	by map[string]*overridden
}

type overridden struct {
	leases  map[string]string // key to lease ID
	pruneAt int               // look again once leases grows to this
}

// minPrune is the fewest entries worth a look at which have ended.
const minPrune = 64

// Add records that principal holds lease id of key under another name.
func (o *OwnerOverrides) Add(principal, key, id string, read ReadState) {
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
		o.prune(principal, v, read)
	}
}

// Count returns how many current leases principal holds under other
// names. Once the remembered ones reach room, those no longer current are
// forgotten first, so that only current leases can refuse a grant.
func (o *OwnerOverrides) Count(principal string, room int, read ReadState) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	v := o.by[principal]
	if v == nil {
		return 0
	}
	if len(v.leases) >= room {
		o.prune(principal, v, read)
	}
	return len(v.leases)
}

// prune forgets principal's leases that are no longer current in the
// state read gives. The caller holds o.mu; nothing holds the state's lock
// while it takes o.mu.
func (o *OwnerOverrides) prune(principal string, v *overridden, read ReadState) {
	read(func(st *lease.State) {
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
