package lease_test

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/fencedio/fenced/lease"
)

// FuzzCommandUnmarshal feeds the state machine's decoder arbitrary log
// entries: it must refuse them with ErrBadCommand or decode a command that
// encodes back to one decoding the same, and applying whatever it decodes
// must not panic. Seeds: testdata/fuzz/FuzzCommandUnmarshal.
func FuzzCommandUnmarshal(f *testing.F) {
	for _, c := range []lease.Command{
		{Op: lease.OpAcquire, Key: "orders/7", ID: "0123456789abcdef0123456789abcdef", Owner: "A", TTL: 10 * time.Second},
		{Op: lease.OpRelease, Key: "k", ID: "id", NextID: "next", Owner: "B", TTL: time.Second},
		{Op: lease.OpRevoke, Key: "k", ID: "id", By: "ops"},
		{Op: lease.OpExpireBatch, Term: 3, Expiries: []lease.Expiry{{Key: "a", ID: "00ff"}, {Key: "b", ID: "x", NextID: "abcd", Owner: "C", TTL: time.Second}}},
	} {
		b, err := c.MarshalBinary()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var c lease.Command
		err := c.UnmarshalBinary(b)
		if err != nil {
			if !errors.Is(err, lease.ErrBadCommand) {
				t.Fatalf("error %v does not match ErrBadCommand", err)
			}
			return
		}
		again, err := c.MarshalBinary()
		if err != nil {
			t.Fatalf("decoded %+v does not encode: %v", c, err)
		}
		var d lease.Command
		if err := d.UnmarshalBinary(again); err != nil || !reflect.DeepEqual(c, d) {
			t.Fatalf("%+v encoded and decoded again is %+v, %v", c, d, err)
		}
		s := lease.New(4)
		s.Apply(1, 1, lease.Command{Op: lease.OpAcquire, Key: c.Key, ID: c.ID, Owner: "x", TTL: time.Second})
		s.Apply(2, c.Term, c)
	})
}

// FuzzRestore feeds snapshot restore arbitrary bytes: it must refuse them
// with ErrBadSnapshot or restore a state that survives its own snapshot
// unchanged. Seeds: testdata/fuzz/FuzzRestore.
func FuzzRestore(f *testing.F) {
	s := lease.New(2)
	s.Apply(1, 1, lease.Command{Op: lease.OpAcquire, Key: "a", ID: "1", Owner: "A", TTL: time.Second})
	s.Apply(2, 1, lease.Command{Op: lease.OpAcquire, Key: "b", ID: "2", Owner: "B", TTL: 2 * time.Second})
	s.Apply(3, 1, lease.Command{Op: lease.OpRelease, Key: "b", ID: "2"})
	var buf bytes.Buffer
	if _, err := s.Snapshot().WriteTo(&buf); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := lease.Restore(bytes.NewReader(b), 8)
		if err != nil {
			if !errors.Is(err, lease.ErrBadSnapshot) {
				t.Fatalf("error %v does not match ErrBadSnapshot", err)
			}
			return
		}
		var out bytes.Buffer
		if _, err := st.Snapshot().WriteTo(&out); err != nil {
			t.Fatal(err)
		}
		again, err := lease.Restore(&out, 8)
		if err != nil {
			t.Fatalf("snapshot of a restored state does not restore: %v", err)
		}
		if again.Applied() != st.Applied() || !reflect.DeepEqual(again.List("", 0), st.List("", 0)) {
			t.Fatalf("state changed through its snapshot: %+v -> %+v", st.List("", 0), again.List("", 0))
		}
		for _, l := range st.List("", 0) {
			if again.LastToken(l.Key) != st.LastToken(l.Key) {
				t.Fatalf("last token of %q changed through the snapshot", l.Key)
			}
		}
	})
}
