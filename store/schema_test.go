package store_test

import (
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/bbolt"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/store"
)

func be64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

// writeBolt runs f on the store's file while no store has it open.
func writeBolt(t *testing.T, dir string, f func(tx *bbolt.Tx) error) {
	t.Helper()
	db, err := bbolt.Open(filepath.Join(dir, store.FileName), 0o600, nil)
	if err != nil {
		t.Fatalf("open bbolt: %v", err)
	}
	defer db.Close()
	if err := db.Update(f); err != nil {
		t.Fatalf("update bbolt: %v", err)
	}
}

func openDir(dir string) (*store.Store, error) {
	return store.Open(store.Config{DataDir: dir, Logger: slog.New(slog.DiscardHandler), Registerer: prometheus.NewRegistry()})
}

// A data dir written by the first layout, which kept highest tokens in the
// store's own "highest" bucket, still opens: its tokens move to the guard's
// bucket and keep fencing, and the audit goes on from where it was.
func TestOpensSchemaVersion1(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	writeBolt(t, dir, func(tx *bbolt.Tx) error {
		for _, b := range []string{"meta", "objects", "highest", "audit"} {
			if _, err := tx.CreateBucket([]byte(b)); err != nil {
				return err
			}
		}
		if err := tx.Bucket([]byte("meta")).Put([]byte("schema"), be64(1)); err != nil {
			return err
		}
		hi := tx.Bucket([]byte("highest"))
		if err := hi.Put([]byte("s"), be64(7)); err != nil {
			return err
		}
		if err := hi.Put([]byte("damaged"), []byte{1, 2, 3}); err != nil {
			return err
		}
		audit := tx.Bucket([]byte("audit"))
		seq, err := audit.NextSequence()
		if err != nil {
			return err
		}
		return audit.Put(be64(seq), []byte(`{"seq":1,"scope":"s","token":7,"highestBefore":0,"object":"o","op":"put","time":"2026-01-01T00:00:00Z","valueLength":1}`))
	})

	s, err := openDir(dir)
	if err != nil {
		t.Fatalf("Open a version 1 dir: %v", err)
	}
	e := &env{t: t, s: s}
	if h := e.highest("s"); h != 7 {
		t.Errorf("Highest(s) = %d after the move, want 7", h)
	}
	r := e.serve(http.MethodPut, "/v1/objects/o", fencing("s", tok(5)), []byte("stale"))
	mustStatus(t, "stale PUT", r, http.StatusConflict)
	if p := r.problem(t); p["highestToken"] != float64(7) {
		t.Errorf("409 highestToken = %v, want 7", p["highestToken"])
	}
	rec, err := s.Put(ctx, "s", 7, "o", []byte("v"))
	if err != nil || rec.Seq != 2 || rec.HighestBefore != 7 {
		t.Errorf("Put with the highest token = %+v, %v; want seq 2 over highest 7", rec, err)
	}
	if _, err := s.Put(ctx, "damaged", 9, "d", []byte("v")); err == nil || errors.Is(err, fence.ErrStaleToken) {
		t.Errorf("Put under a damaged token = %v; want a storage error", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	writeBolt(t, dir, func(tx *bbolt.Tx) error {
		if tx.Bucket([]byte("highest")) != nil {
			t.Error("the version 1 bucket is still there")
		}
		if v := tx.Bucket([]byte("meta")).Get([]byte("schema")); binary.BigEndian.Uint64(v) != 2 {
			t.Errorf("schema = %x, want 2", v)
		}
		return nil
	})
	s, err = openDir(dir)
	if err != nil {
		t.Fatalf("reopen after the move: %v", err)
	}
	if h, err := s.Highest(ctx, "s"); err != nil || h != 7 {
		t.Errorf("Highest(s) after reopening = %d, %v; want 7", h, err)
	}
	s.Close()
}

// A file from a newer store is refused with a message saying so, not
// misread.
func TestRefusesUnknownSchema(t *testing.T) {
	dir := t.TempDir()
	s, err := openDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	writeBolt(t, dir, func(tx *bbolt.Tx) error {
		return tx.Bucket([]byte("meta")).Put([]byte("schema"), be64(3))
	})
	if _, err := openDir(dir); err == nil || !strings.Contains(err.Error(), "unsupported schema version") {
		t.Fatalf("Open a version 3 file = %v; want unsupported schema version", err)
	}
}
