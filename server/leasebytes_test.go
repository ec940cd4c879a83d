package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencedio/fenced/internal/testutil"
	"github.com/fencedio/fenced/lease"
	"github.com/fencedio/fenced/server/internal/apierr"
)

// MaxLeaseBytes refuses the acquisition whose lease would pass it, to the
// byte, and changes nothing; the bytes of a released or expired lease take
// a new one; the count is the same after a snapshot and a restart, and
// still refuses.
func TestMaxLeaseBytes(t *testing.T) {
	ctx := context.Background()
	c := lease.Cost("k1", "o")
	cfg := Config{DataDir: t.TempDir(), MaxLeaseBytes: 3*c - 1}
	s := newTestServer(t, cfg)
	bytes := func() (n int64) {
		s.fsm.Read(func(st *lease.State) { n = st.Bytes() })
		return n
	}
	acquire := func(key string, ttl time.Duration) (lease.Lease, error) {
		return s.Acquire(ctx, key, "o", ttl, 0)
	}
	refused := func(key string) {
		t.Helper()
		before := bytes()
		_, err := acquire(key, time.Minute)
		if !errors.Is(err, apierr.ErrTooManyLeaseBytes) || !strings.Contains(err.Error(), "max-lease-bytes") {
			t.Fatalf("acquire %q with %d of %d bytes counted: %v, want refused naming max-lease-bytes", key, before, cfg.MaxLeaseBytes, err)
		}
		if _, held := s.currentOf(key); held || bytes() != before {
			t.Fatalf("the refused acquisition of %q changed the state: held %v, %d bytes counted (%d before)", key, held, bytes(), before)
		}
	}
	granted := func(key string, ttl time.Duration) lease.Lease {
		t.Helper()
		l, err := acquire(key, ttl)
		if err != nil {
			t.Fatalf("acquire %q with %d of %d bytes counted: %v", key, bytes(), cfg.MaxLeaseBytes, err)
		}
		return l
	}
	k1 := granted("k1", time.Minute)
	granted("k2", time.Minute)
	refused("k3")             // 3c: one byte over
	granted("k", time.Minute) // 3c-1: the budget, to the byte
	if got := bytes(); got != 3*c-1 {
		t.Fatalf("%d bytes counted, want %d", got, 3*c-1)
	}
	if err := s.Release(ctx, "k1", k1.ID); err != nil {
		t.Fatal(err)
	}
	k3 := granted("k3", time.Minute) // in k1's bytes
	refused("k4")

	if err := s.Release(ctx, "k3", k3.ID); err != nil {
		t.Fatal(err)
	}
	granted("k3", cfg.WithDefaults().MinTTL) // left to expire
	testutil.Eventually(t, 10*time.Second, func() error {
		if _, held := s.currentOf("k3"); held {
			return fmt.Errorf("k3 has not expired")
		}
		return nil
	})
	granted("k4", time.Minute) // in the expired lease's bytes
	refused("k5")

	want := bytes()
	if err := s.Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = newTestServer(t, cfg)
	if _, restored := s.SnapshotStats(); restored == 0 {
		t.Fatal("the restarted node restored no snapshot")
	}
	if got := bytes(); got != want {
		t.Fatalf("after a snapshot and a restart %d bytes counted, want %d", got, want)
	}
	refused("k5")
}

// A negative MaxLeaseBytes is refused; zero takes the default, a quarter of
// the memory available.
func TestMaxLeaseBytesConfig(t *testing.T) {
	if err := (Config{MaxLeaseBytes: -1}).Validate(); err == nil || !strings.Contains(err.Error(), "MaxLeaseBytes") {
		t.Errorf("MaxLeaseBytes -1: %v, want refused naming it", err)
	}
	mem := availableMemory()
	if got := (Config{}).WithDefaults().MaxLeaseBytes; mem > 0 && got != int64(mem/4) || mem == 0 && got != 1<<30 {
		t.Errorf("default MaxLeaseBytes %d with %d bytes of memory available", got, mem)
	}
}
