package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencedio/fenced/internal/fencedtest"
	"github.com/fencedio/fenced/lease"
	"github.com/fencedio/fenced/server"
)

// snapshot save takes the backup from the node that leads, past a dead
// first endpoint, and writes a backup that restores every key's token and
// holds no lease ID.
func TestSnapshotSave(t *testing.T) {
	srv := fencedtest.Start(t)
	l, err := srv.Acquire(context.Background(), "k", "o", time.Minute, 0)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	file := filepath.Join(t.TempDir(), "backup")
	out, err := runEndpoints(t, "http://"+dead+","+srv.URL, "snapshot", "save", file)
	if err != nil || !strings.Contains(out, "saved "+file) || !strings.Contains(out, srv.URL) {
		t.Fatalf("snapshot save: %v\n%s", err, out)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, []byte(l.ID)) {
		t.Error("the backup holds a lease ID")
	}
	st, err := lease.Restore(bytes.NewReader(b), 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, held := st.Get("k"); held || st.LastToken("k") != l.Token {
		t.Errorf("backup: k held %v, last token %d, want free with last token %d", held, st.LastToken("k"), l.Token)
	}
	if _, err := server.RestoreBackup(server.RestoreConfig{DataDir: t.TempDir()}, bytes.NewReader(b)); err != nil {
		t.Errorf("restore the saved backup: %v", err)
	}
	if out, err := runEndpoints(t, srv.URL, "snapshot", "save", filepath.Join(t.TempDir(), "no", "such", "dir")); err == nil {
		t.Errorf("snapshot save into a missing directory: no error\n%s", out)
	}
}
