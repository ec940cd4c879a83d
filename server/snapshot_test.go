package server_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/internal/fencedtest"
	"github.com/fencedio/fenced/server"
)

// TestForcedSnapshotIsRestored: Snapshot takes a snapshot at once, a
// restart restores it, and the lease it holds is still current with its
// token, while the next grant gets a higher one.
func TestForcedSnapshotIsRestored(t *testing.T) {
	cfg := fencedtest.Config(t)
	cfg.SnapshotThreshold = 2
	cfg.SnapshotInterval = time.Hour // only the forced snapshot
	srv := fencedtest.StartConfig(t, cfg)
	ctx := context.Background()
	c := srv.Client(t, client.Config{TTL: 10 * time.Second, Owner: "w1"})
	held, err := c.Acquire(ctx, "snap/held")
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		l, err := c.Acquire(ctx, "snap/freed")
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := srv.Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	if taken, _ := srv.SnapshotStats(); taken != 1 {
		t.Fatalf("snapshots taken %d, want 1", taken)
	}
	srv = srv.Restart(t)
	if _, restored := srv.SnapshotStats(); restored != 1 {
		t.Fatalf("snapshots restored %d, want 1", restored)
	}
	c = srv.Client(t, client.Config{TTL: 10 * time.Second, Owner: "w2"})
	got, err := c.Get(ctx, "snap/held")
	if err != nil || got.Lease == nil || got.Lease.Owner != "w1" || got.Lease.Token != held.Token() {
		t.Fatalf("after restore: %+v %v, want w1's lease, token %d", got, err, held.Token())
	}
	next, err := c.Acquire(ctx, "snap/freed")
	if err != nil {
		t.Fatal(err)
	}
	if next.Token() <= held.Token() {
		t.Errorf("token %d after restore, not above %d", next.Token(), held.Token())
	}
}

func TestSnapshotIntervalValidated(t *testing.T) {
	cfg := server.Config{SnapshotInterval: time.Millisecond}
	if err := cfg.Validate(); err == nil {
		t.Error("a 1ms SnapshotInterval was accepted")
	}
	cfg = server.Config{}
	if err := cfg.Validate(); err != nil || cfg.WithDefaults().SnapshotInterval != 10*time.Second {
		t.Errorf("default SnapshotInterval %v, %v; want 10s", cfg.WithDefaults().SnapshotInterval, err)
	}
}
