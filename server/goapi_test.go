package server_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencedio/fenced/internal/fencedtest"
	"github.com/fencedio/fenced/lease"
)

// The Go API of a node takes domain types, so that code outside this
// module can embed a node and call it without the generated wire types.
func TestServerGoAPI(t *testing.T) {
	srv := fencedtest.Start(t)
	ctx := context.Background()
	for _, bad := range []struct {
		ttl, wait time.Duration
	}{{0, 0}, {-time.Second, 0}, {2 * time.Hour, 0}, {time.Minute, -time.Second}, {time.Minute, time.Hour}} {
		if _, err := srv.Acquire(ctx, "go/k", "o", bad.ttl, bad.wait); err == nil {
			t.Errorf("Acquire with ttl %v, wait %v accepted", bad.ttl, bad.wait)
		}
	}
	if st := srv.Stats(); st.Leases != 0 || st.Acquired != 0 {
		t.Fatalf("refused acquisitions changed the state: %+v", st)
	}
	l, err := srv.Acquire(ctx, "go/k", "o", time.Minute, 0)
	if err != nil || l.Token == 0 || l.TTL != time.Minute {
		t.Fatalf("Acquire = %+v, %v", l, err)
	}
	if _, err := srv.Acquire(ctx, "go/k", "p", time.Minute, 0); !errors.Is(err, lease.ErrHeld) {
		t.Fatalf("second Acquire: %v, want held", err)
	}
	if r, err := srv.Renew(ctx, "go/k", l.ID); err != nil || r.Token != l.Token {
		t.Fatalf("Renew = %+v, %v", r, err)
	}
	if err := srv.Release(ctx, "go/k", l.ID); err != nil {
		t.Fatal(err)
	}
	if err := srv.Release(ctx, "go/k", l.ID); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("second Release: %v, want not held", err)
	}
}
