package admission

import (
	"fmt"
	"testing"
	"time"

	"github.com/fencedio/fenced/lease"
)

// stateOf is a ReadState of st.
func stateOf(st *lease.State) ReadState { return func(fn func(*lease.State)) { fn(st) } }

func leaseID(n int) string { return fmt.Sprintf("%032x", n) }

// grant makes lease n of key current in st.
func grant(t *testing.T, st *lease.State, index uint64, key string, n int) {
	t.Helper()
	r := st.Apply(index, 1, lease.Command{Op: lease.OpAcquire, Key: key, ID: leaseID(n), Owner: "o", TTL: time.Minute})
	if r.Err != nil {
		t.Fatal(r.Err)
	}
}

// The leases a principal acquired under other names are forgotten once
// they end: the memory they take stays within twice the current ones.
func TestOwnerOverridesForgetEndedLeases(t *testing.T) {
	read := stateOf(lease.New(0))
	var o OwnerOverrides
	for i := range 10*minPrune + 1 {
		o.Add("boss", fmt.Sprintf("k/%d", i), "00", read) // no such lease is current
	}
	if v := o.by["boss"]; v == nil || len(v.leases) >= minPrune {
		t.Fatalf("ended leases remembered: %v, want fewer than %d", v, minPrune)
	}
	if n := o.Count("boss", 1, read); n != 0 {
		t.Fatalf("count %d, want 0: none is current", n)
	}
	if _, ok := o.by["boss"]; ok {
		t.Fatal("a principal with no current lease is still remembered")
	}
}

// Count counts a principal's current leases under other names, and looks
// for ended ones only once they could fill room.
func TestOwnerOverridesCount(t *testing.T) {
	st := lease.New(0)
	read := stateOf(st)
	var o OwnerOverrides
	for i := range 3 {
		key := fmt.Sprint("k/", i)
		grant(t, st, uint64(i+1), key, i)
		o.Add("boss", key, leaseID(i), read)
	}
	o.Add("boss", "gone", leaseID(9), read) // ended before it was counted
	o.Add("other", "k/0", leaseID(0), read)
	if n := o.Count("boss", 10, read); n != 4 {
		t.Errorf("count with room to spare %d, want 4: no look at ended leases", n)
	}
	if n := o.Count("boss", 4, read); n != 3 {
		t.Errorf("count at room %d, want the 3 current", n)
	}
	if n := o.Count("other", 1, read); n != 1 {
		t.Errorf("other principal's count %d, want 1", n)
	}
	if n := o.Count("nobody", 0, read); n != 0 {
		t.Errorf("unknown principal's count %d", n)
	}
}
