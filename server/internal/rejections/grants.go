package rejections

import (
	"container/list"
	"sync"
	"time"

	"github.com/fencedio/fenced/lease"
)

// Grant memory: so that a reported rejection can say whose epochs the two
// tokens were, each node remembers the last grants it applied (the node
// feeds a GrantMemory the transitions it applies, and resolves a report's
// tokens in it). The horizon is bounded twice: the newest grantsPerKey
// grants of a key, and the maxGrantKeys keys granted most recently. Older tokens resolve to nothing
// (the report's own owner is shown instead). Grants replayed from the log
// when the node starts are remembered without a time: their time is not in
// the log, and the replay time would be a lie.
const (
	grantsPerKey = 16
	maxGrantKeys = 10_000
)

// grant is one remembered acquisition.
type grant struct {
	token uint64
	owner string
	at    time.Time // zero when unknown (replayed)
}

type keyGrants struct {
	key    string
	grants []grant // oldest first; tokens increase (invariant I1)
}

// GrantMemory remembers the newest grants a node applied. It is safe for
// concurrent use. Record is called on the apply path and costs O(1)
// amortized.
type GrantMemory struct {
	mu      sync.Mutex
	perKey  int
	maxKeys int
	keys    map[string]*list.Element // of *keyGrants
	order   *list.List               // least recently granted key at the front
}

// NewGrantMemory returns an empty memory of the newest grantsPerKey grants
// of the maxGrantKeys keys granted most recently.
func NewGrantMemory() *GrantMemory { return newGrantMemory(grantsPerKey, maxGrantKeys) }

func newGrantMemory(perKey, maxKeys int) *GrantMemory {
	return &GrantMemory{perKey: perKey, maxKeys: maxKeys, keys: make(map[string]*list.Element), order: list.New()}
}

// Record remembers ev if it is a grant; at is zero for replayed grants
// (GrantTime).
func (m *GrantMemory) Record(ev lease.Event, at time.Time) {
	if ev.Type != lease.Acquired {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	el, ok := m.keys[ev.Lease.Key]
	if !ok {
		if m.order.Len() >= m.maxKeys {
			oldest := m.order.Front()
			delete(m.keys, oldest.Value.(*keyGrants).key)
			m.order.Remove(oldest)
		}
		el = m.order.PushBack(&keyGrants{key: ev.Lease.Key})
		m.keys[ev.Lease.Key] = el
	} else {
		m.order.MoveToBack(el)
	}
	kg := el.Value.(*keyGrants)
	if len(kg.grants) == m.perKey {
		copy(kg.grants, kg.grants[1:])
		kg.grants = kg.grants[:m.perKey-1]
	}
	kg.grants = append(kg.grants, grant{token: ev.Lease.Token, owner: ev.Lease.Owner, at: at})
}

// Lookup returns the remembered grant of token for key.
func (m *GrantMemory) Lookup(key string, token uint64) (Grant, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	el, ok := m.keys[key]
	if !ok {
		return Grant{}, false
	}
	for _, g := range el.Value.(*keyGrants).grants {
		if g.token == token {
			return Grant{Owner: g.owner, At: g.at}, true
		}
	}
	return Grant{}, false
}

// GrantTime is when a grant being applied now was made: now, or unknown
// (zero) for a grant replayed from the log at start.
func GrantTime(replay bool) time.Time {
	if replay {
		return time.Time{}
	}
	return time.Now()
}
