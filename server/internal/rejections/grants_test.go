package rejections

import (
	"fmt"
	"testing"
	"time"

	"github.com/fencedio/fenced/lease"
)

func TestGrantMemoryBounds(t *testing.T) {
	m := newGrantMemory(2, 2)
	at := time.Unix(100, 0)
	grant := func(key string, token uint64) {
		m.Record(lease.Event{Type: lease.Acquired, Lease: lease.Lease{Key: key, Owner: fmt.Sprint("o", token), Token: token}}, at)
	}
	grant("a", 1)
	grant("a", 2)
	grant("a", 3) // a keeps 2 and 3
	grant("b", 4)
	grant("c", 5) // a, granted least recently, is forgotten
	m.Record(lease.Event{Type: lease.Released, Lease: lease.Lease{Key: "d", Token: 6}}, at)
	for _, tc := range []struct {
		key   string
		token uint64
		ok    bool
	}{{"a", 1, false}, {"a", 3, false}, {"b", 4, true}, {"c", 5, true}, {"d", 6, false}} {
		g, ok := m.Lookup(tc.key, tc.token)
		if ok != tc.ok || (ok && (g.Owner != fmt.Sprint("o", tc.token) || !g.At.Equal(at))) {
			t.Errorf("Lookup(%s, %d) = %+v %v, want found=%v", tc.key, tc.token, g, ok, tc.ok)
		}
	}
	m = newGrantMemory(2, 10)
	grant("a", 1)
	grant("a", 2)
	grant("a", 3)
	if _, ok := m.Lookup("a", 1); ok {
		t.Error("more than 2 grants kept per key")
	}
	if _, ok := m.Lookup("a", 2); !ok {
		t.Error("second newest grant forgotten")
	}
}

// A grant replayed at start is remembered without a time.
func TestGrantTime(t *testing.T) {
	if at := GrantTime(true); !at.IsZero() {
		t.Errorf("GrantTime(replay) = %v, want zero", at)
	}
	if at := GrantTime(false); at.IsZero() {
		t.Error("GrantTime(live) is zero")
	}
}
