package fencebolt_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"go.etcd.io/bbolt"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencebolt"
)

// HighestTx inside DoTx's apply sees the highest before this mutation.
func TestBoltHighestTx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	g := openBolt(t, filepath.Join(t.TempDir(), "fence.db"), fencebolt.Config{})
	var seen []uint64
	for _, tok := range []uint64{3, 3, 8} {
		err := g.DoTx(ctx, "s", tok, func(tx *bbolt.Tx) error {
			h, err := g.HighestTx(tx, "s")
			seen = append(seen, h)
			return err
		})
		if err != nil {
			t.Fatalf("DoTx %d: %v", tok, err)
		}
	}
	if want := []uint64{0, 3, 3}; len(seen) != 3 || seen[0] != want[0] || seen[1] != want[1] || seen[2] != want[2] {
		t.Errorf("HighestTx inside DoTx saw %v, want %v", seen, want)
	}
	err := g.DB().View(func(tx *bbolt.Tx) error {
		if h, err := g.HighestTx(tx, "s"); err != nil || h != 8 {
			t.Errorf("HighestTx after = %d, %v; want 8", h, err)
		}
		if _, err := g.HighestTx(tx, "a\u200bb"); !errors.Is(err, fence.ErrInvalidScope) {
			t.Errorf("HighestTx with an invalid scope = %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A stored highest token that is not 8 bytes is an error for every reader
// and refuses every mutation of its scope: reading it as 0 would turn
// fencing off.
func TestBoltDamagedTokenRefusesMutations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	g := openBolt(t, filepath.Join(t.TempDir(), "fence.db"), fencebolt.Config{})
	if err := g.DB().Update(func(tx *bbolt.Tx) error {
		return tx.Bucket([]byte(fencebolt.Bucket)).Put([]byte("s"), []byte{0, 9})
	}); err != nil {
		t.Fatal(err)
	}
	applied := false
	errDo := g.Do(ctx, "s", 1, func(context.Context) error { applied = true; return nil })
	errTx := g.DoTx(ctx, "s", 1, func(*bbolt.Tx) error { applied = true; return nil })
	_, errH := g.Highest(ctx, "s")
	var errHTx error
	g.DB().View(func(tx *bbolt.Tx) error { _, errHTx = g.HighestTx(tx, "s"); return nil })
	for i, err := range []error{errDo, errTx, errH, errHTx} {
		if err == nil || errors.Is(err, fence.ErrStaleToken) {
			t.Errorf("%s = %v; want a storage error", []string{"Do", "DoTx", "Highest", "HighestTx"}[i], err)
		}
	}
	if applied {
		t.Error("a mutation was applied under a damaged token")
	}
}
