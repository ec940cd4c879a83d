//go:build fenced_failpoints

package failstore

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	walfs "github.com/hashicorp/raft-wal/fs"
	bolt "go.etcd.io/bbolt"

	"github.com/fencedio/fenced/internal/failpoint"
)

func losingUnsynced(t *testing.T) {
	old := loseUnsynced
	loseUnsynced = true
	t.Cleanup(func() { loseUnsynced = old })
}

// TestLazyVFSHoldsUnsyncedWrites: a write is seen by readers of the file at
// once, reaches the file only on Sync, and is lost if the process dies
// before (here: the file read from disk, as a restart would).
func TestLazyVFSHoldsUnsyncedWrites(t *testing.T) {
	losingUnsynced(t)
	dir := t.TempDir()
	v := WrapVFS(walfs.New())
	f, err := v.Create(dir, "seg.wal", 64)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("synced"), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("lost"), 10); err != nil {
		t.Fatal(err)
	}
	r, err := v.OpenReader(dir, "seg.wal")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got := make([]byte, 14)
	if _, err := r.ReadAt(got, 0); err != nil || string(got) != "synced\x00\x00\x00\x00lost" {
		t.Fatalf("reader sees %q, %v; want the unsynced write too", got, err)
	}
	disk, err := os.ReadFile(filepath.Join(dir, "seg.wal"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(disk, []byte("synced\x00")) || bytes.Contains(disk, []byte("lost")) {
		t.Fatalf("on disk before the second Sync: %q; want only the synced write", disk[:14])
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if disk, _ = os.ReadFile(filepath.Join(dir, "seg.wal")); !bytes.Contains(disk, []byte("lost")) {
		t.Fatalf("on disk after Sync: %q", disk[:14])
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestLogSkipFsyncNeverReachesTheFile: with the mutant and the simulation
// on, a synced write stays in memory, so a power loss takes it.
func TestLogSkipFsyncNeverReachesTheFile(t *testing.T) {
	losingUnsynced(t)
	old := enabled
	enabled = func(n failpoint.Name) bool { return n == failpoint.LogSkipFsync }
	t.Cleanup(func() { enabled = old })
	dir := t.TempDir()
	f, err := WrapVFS(walfs.New()).Create(dir, "seg.wal", 64)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte("acked"), 0)
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if disk, _ := os.ReadFile(filepath.Join(dir, "seg.wal")); bytes.Contains(disk, []byte("acked")) {
		t.Fatal("the mutant's Sync wrote the file")
	}
}

// TestRestoreDurable: a bbolt commit after the last Mark is undone by
// RestoreDurable, and the file opens at the marked commit.
func TestRestoreDurable(t *testing.T) {
	losingUnsynced(t)
	path := filepath.Join(t.TempDir(), "x.db")
	put := func(db *bolt.DB, k string) {
		t.Helper()
		err := db.Update(func(tx *bolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("b"))
			if err != nil {
				return err
			}
			return b.Put([]byte(k), make([]byte, 3000)) // spills over pages
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	im := &DurableImage{Path: path}
	for _, k := range []string{"a", "b", "c"} {
		put(db, k)
		if err := im.Mark(); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 50 {
		put(db, string(rune('d'+i))) // after the last durability point
	}
	db.Close()
	im.Close()
	lost, err := RestoreDurable(path)
	if err != nil || !lost {
		t.Fatalf("RestoreDurable = %v, %v; want a change", lost, err)
	}
	db, err = bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.View(func(tx *bolt.Tx) error {
		if n := tx.Bucket([]byte("b")).Stats().KeyN; n != 3 {
			t.Errorf("%d keys after the power loss, want the 3 marked", n)
		}
		return nil
	})
	if lost, err := RestoreDurable(path); err != nil || lost {
		t.Errorf("second RestoreDurable = %v, %v; want no change", lost, err)
	}
}
