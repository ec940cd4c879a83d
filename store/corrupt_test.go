package store_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/bbolt"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/store"
)

// A highest token that cannot be decoded must refuse writes of its scope:
// reading it as 0 would silently turn fencing off for that scope and let a
// stale writer through.
func TestCorruptHighestTokenRefusesWrites(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	e := newEnv(t, store.Config{DataDir: dir})
	mustStatus(t, "PUT", e.put("obj", "s", 7, "v7"), http.StatusNoContent)
	mustStatus(t, "PUT other scope", e.put("other", "t", 3, "t3"), http.StatusNoContent)
	if err := e.s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	for _, bad := range [][]byte{{0, 0, 7}, make([]byte, 9)} {
		db, err := bbolt.Open(filepath.Join(dir, store.FileName), 0o600, nil)
		if err != nil {
			t.Fatalf("open bbolt: %v", err)
		}
		if err := db.Update(func(tx *bbolt.Tx) error {
			return tx.Bucket(store.HighestBucket).Put([]byte("s"), bad)
		}); err != nil {
			t.Fatalf("corrupt the highest token: %v", err)
		}
		if err := db.Close(); err != nil {
			t.Fatalf("close bbolt: %v", err)
		}

		s, err := store.Open(store.Config{DataDir: dir, Logger: slog.New(slog.DiscardHandler), Registerer: prometheus.NewRegistry()})
		if err != nil {
			t.Fatalf("reopen with a corrupt token (%d bytes): %v", len(bad), err)
		}
		for _, tc := range []struct {
			name  string
			write func() error
		}{
			{"stale put", func() error { _, err := s.Put(ctx, "s", 1, "obj", []byte("stale")); return err }},
			{"current put", func() error { _, err := s.Put(ctx, "s", 7, "obj", []byte("again")); return err }},
			{"stale delete", func() error { _, err := s.Delete(ctx, "s", 1, "obj"); return err }},
		} {
			err := tc.write()
			if err == nil {
				t.Errorf("%d-byte token: %s accepted; want an error", len(bad), tc.name)
			} else if errors.Is(err, fence.ErrStaleToken) {
				t.Errorf("%d-byte token: %s: %v; want a storage error, not a stale rejection with an invented highest", len(bad), tc.name, err)
			}
		}
		if _, err := s.Highest(ctx, "s"); err == nil {
			t.Errorf("%d-byte token: Highest succeeded; want an error", len(bad))
		}
		obj, err := s.Get(ctx, "obj")
		if err != nil || string(obj.Value) != "v7" || obj.Token != 7 {
			t.Errorf("%d-byte token: object after refused writes = %+v, %v; want v7 by token 7", len(bad), obj, err)
		}
		// Other scopes are not affected.
		if _, err := s.Put(ctx, "t", 3, "other", []byte("t3b")); err != nil {
			t.Errorf("%d-byte token: write to an intact scope: %v", len(bad), err)
		}
		// Over HTTP the refusal is a 500, not a 409 with an invented highest.
		he := &env{t: t, s: s}
		r := he.serve(http.MethodPut, "/v1/objects/obj", fencing("s", tok(9)), []byte("v9"))
		if r.status != http.StatusInternalServerError {
			t.Errorf("%d-byte token: PUT status %d (%s), want 500", len(bad), r.status, r.body)
		}
		if err := s.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
	}
}
