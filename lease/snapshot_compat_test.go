package lease_test

import (
	"bytes"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/fencedio/fenced/lease"
)

// goldenSnapshot is a snapshot written by an earlier build, kept as it was
// written: nodes restore the snapshots of older builds and older builds
// restore theirs, so the format never changes under the same header.
const goldenSnapshot = "testdata/snapshot-v1.golden"

// goldenState is the state goldenSnapshot holds, built by applying
// commands: leases of shared and single owners, a handover, an expiry
// batch, keys in and out of key order and at the index's width, freed keys
// remembered and forgotten.
func goldenState(t *testing.T) *lease.State {
	s := lease.New(40)
	index := uint64(0)
	apply := func(c lease.Command) lease.Result {
		index += 2 // other entries in between
		res := s.Apply(index, 1, c)
		if res.Err != nil {
			t.Fatalf("entry %d (%+v): %v", index, c, res.Err)
		}
		return res
	}
	for i := range 150 {
		key := fmt.Sprintf("orders/%03d", (i*37)%150) // not in key order
		apply(lease.Command{Op: lease.OpAcquire, Key: key, ID: fmt.Sprintf("%032x", i*7919+1), Owner: fmt.Sprint("owner-", i%4),
			TTL: time.Duration(1+i%5) * time.Second})
	}
	apply(lease.Command{Op: lease.OpAcquire, Key: "ü/κ", ID: "not-hex-id", Owner: "", TTL: time.Hour})
	for i := range 60 {
		key := fmt.Sprintf("orders/%03d", i*2)
		var id string
		s.Each(func(l lease.Lease) bool { id = l.ID; return l.Key != key })
		apply(lease.Command{Op: lease.OpRelease, Key: key, ID: id})
	}
	var id string
	s.Each(func(l lease.Lease) bool { id = l.ID; return l.Key != "orders/001" })
	apply(lease.Command{Op: lease.OpRelease, Key: "orders/001", ID: id, NextID: "handed-over", Owner: "next", TTL: 1500 * time.Millisecond})
	var expiries []lease.Expiry
	for _, key := range []string{"orders/003", "orders/005", "orders/149"} {
		s.Each(func(l lease.Lease) bool { id = l.ID; return l.Key != key })
		expiries = append(expiries, lease.Expiry{Key: key, ID: id})
	}
	index += 2
	if res := s.Apply(index, 7, lease.Command{Op: lease.OpExpireBatch, Term: 7, Expiries: expiries}); res.Err != nil {
		t.Fatal(res.Err)
	}
	return s
}

// An old snapshot restores to the state it was written from, and the state
// built from the same commands writes the same bytes: a snapshot of this
// build restores in an older one and the other way round.
func TestSnapshotFormatUnchanged(t *testing.T) {
	t.Parallel()
	golden, err := os.ReadFile(goldenSnapshot)
	if err != nil {
		t.Fatal(err)
	}
	want := goldenState(t)
	var written bytes.Buffer
	if _, err := want.Snapshot().WriteTo(&written); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(written.Bytes(), golden) {
		t.Fatalf("the snapshot written differs from %s (%d bytes, want %d)", goldenSnapshot, written.Len(), len(golden))
	}

	got, err := lease.Restore(bytes.NewReader(golden), 40)
	if err != nil {
		t.Fatalf("restore %s: %v", goldenSnapshot, err)
	}
	if got.Applied() != want.Applied() || got.Len() != want.Len() || got.Len() != 88 {
		t.Fatalf("restored applied %d with %d leases, want %d with %d (88)", got.Applied(), got.Len(), want.Applied(), want.Len())
	}
	if g, w := fmt.Sprint(got.List("", 0)), fmt.Sprint(want.List("", 0)); g != w {
		t.Fatalf("restored leases\n%s\nwant\n%s", g, w)
	}
	for i := range 150 {
		key := fmt.Sprintf("orders/%03d", i)
		if g, w := got.LastToken(key), want.LastToken(key); g != w {
			t.Errorf("LastToken(%q) = %d, want %d", key, g, w)
		}
	}
	var again bytes.Buffer
	if _, err := got.Snapshot().WriteTo(&again); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again.Bytes(), golden) {
		t.Fatal("the restored state writes other bytes than it was restored from")
	}
}
