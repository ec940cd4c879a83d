package server

import "github.com/fencedio/fenced/lease"

// recentlyExpired remembers the last expired lease of up to
// maxRecentlyExpired keys, so that the next grant can be logged as a
// takeover. Only the FSM goroutine uses it.
type recentlyExpired struct{ m map[string]lease.Lease }

const maxRecentlyExpired = 10_000

func (r *recentlyExpired) put(l lease.Lease) {
	if r.m == nil {
		r.m = make(map[string]lease.Lease)
	}
	if len(r.m) >= maxRecentlyExpired {
		for k := range r.m { // drop an arbitrary one: this is only for logs
			delete(r.m, k)
			break
		}
	}
	r.m[l.Key] = l
}

func (r *recentlyExpired) take(key string) (lease.Lease, bool) {
	l, ok := r.m[key]
	if ok {
		delete(r.m, key)
	}
	return l, ok
}
