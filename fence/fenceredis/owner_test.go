package fenceredis_test

import (
	"context"
	"errors"
	"testing"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fenceredis"
)

type ownedLease struct {
	lease
	owner string
}

func (l *ownedLease) Owner() string { return l.owner }

// TestLeaseOwnerReachesObserver: a LeaseGuard passes its lease's owner to
// the observer with each decision.
func TestLeaseOwnerReachesObserver(t *testing.T) {
	ctx := context.Background()
	rec := &recorder{}
	_, g, run := setupWith(t, fenceredis.Config{Observer: rec})
	scope := run + "/owner"
	b := g.WithLease(&ownedLease{lease: lease{key: scope, token: 64}, owner: "worker-B"})
	a := g.WithLease(&ownedLease{lease: lease{key: scope, token: 63}, owner: "worker-A"})
	if err := b.Set(ctx, b.Key("x"), "B", 0); err != nil {
		t.Fatal(err)
	}
	if err := a.Set(ctx, a.Key("x"), "A", 0); !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("stale Set: %v", err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.ds) != 2 || rec.ds[0].Owner != "worker-B" || rec.ds[1].Owner != "worker-A" || rec.ds[1].Accepted {
		t.Fatalf("decisions %+v", rec.ds)
	}
}
