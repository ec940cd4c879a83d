package lease_test

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/fencedio/fenced/lease"
)

func TestRevokeCommandRoundTrip(t *testing.T) {
	t.Parallel()
	for _, c := range []lease.Command{
		{Op: lease.OpRevoke, Key: "k", ID: "0123456789abcdef0123456789abcdef", By: "ops"},
		{Op: lease.OpRevoke, Key: "k", ID: "id", By: "ops", NextID: "next", Owner: "B", TTL: time.Second},
	} {
		b, err := c.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		var got lease.Command
		if err := got.UnmarshalBinary(b); err != nil || !reflect.DeepEqual(got, c) {
			t.Fatalf("round trip of %+v: %+v, %v", c, got, err)
		}
		for i := range len(b) {
			var short lease.Command
			if err := short.UnmarshalBinary(b[:i]); !errors.Is(err, lease.ErrBadCommand) {
				t.Fatalf("truncated to %d bytes: %v", i, err)
			}
		}
	}
	for name, b := range map[string][]byte{
		// A revocation must name who asked, and only version 4 carries it.
		"revoke in the version 2 layout":  {2, byte(lease.OpRevoke), 1, 'k', 2, 'i', 'd', 0, 0, 0},
		"release in the revoke layout":    {4, byte(lease.OpRelease), 1, 'k', 2, 'i', 'd', 0, 0, 0, 2, 'o', 'p'},
		"revoke without a principal":      {4, byte(lease.OpRevoke), 1, 'k', 2, 'i', 'd', 0, 0, 0, 0},
		"revoke with its principal short": {4, byte(lease.OpRevoke), 1, 'k', 2, 'i', 'd', 0, 0, 0, 3, 'o', 'p'},
	} {
		var c lease.Command
		if err := c.UnmarshalBinary(b); !errors.Is(err, lease.ErrBadCommand) {
			t.Errorf("%s: %v, want ErrBadCommand", name, err)
		}
	}
}

// A revocation ends the lease like a release (I1: the next grant has a
// higher token) and records who did it; a stale revocation changes nothing.
func TestRevokeEndsTheCurrentLease(t *testing.T) {
	t.Parallel()
	s := lease.New(0)
	s.Apply(1, 1, lease.Command{Op: lease.OpAcquire, Key: "k", ID: "a", Owner: "A", TTL: time.Second})
	if r := s.Apply(2, 1, lease.Command{Op: lease.OpRevoke, Key: "k", ID: "old", By: "ops"}); !errors.Is(r.Err, lease.ErrNotHeld) || s.Len() != 1 {
		t.Fatalf("revoking a lease that is not current: %+v, %d leases", r, s.Len())
	}
	r := s.Apply(3, 1, lease.Command{Op: lease.OpRevoke, Key: "k", ID: "a", By: "ops"})
	if r.Err != nil || r.Event.Type != lease.Released || r.Event.By != "ops" || r.Event.Lease.ID != "a" || s.Len() != 0 {
		t.Fatalf("revoke: %+v, %d leases", r, s.Len())
	}
	if got := s.LastToken("k"); got != 1 {
		t.Fatalf("last token after revoke = %d, want 1", got)
	}
	r = s.Apply(4, 1, lease.Command{Op: lease.OpAcquire, Key: "k", ID: "b", Owner: "B", TTL: time.Second})
	if r.Err != nil || r.Event.Lease.Token <= 1 {
		t.Fatalf("grant after revoke: %+v", r)
	}
	// With a waiter, the revocation hands the key over in the same entry.
	r = s.Apply(5, 1, lease.Command{Op: lease.OpRevoke, Key: "k", ID: "b", By: "ops", NextID: "c", Owner: "C", TTL: time.Second})
	if r.Err != nil || r.Next.Type != lease.Acquired || r.Next.Lease.Token != 5 || r.Next.Lease.Owner != "C" {
		t.Fatalf("revoke with handover: %+v", r)
	}
}
