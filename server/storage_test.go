package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencedio/fenced/lease"
	"github.com/fencedio/fenced/server/internal/fsm"
	"github.com/fencedio/fenced/server/internal/raftlog"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	wal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/segment"
	bolt "go.etcd.io/bbolt"
)

func storageConfig(dir string) Config {
	return Config{
		DataDir:          dir,
		Listen:           "127.0.0.1:0",
		RaftListen:       "127.0.0.1:0",
		MinTTL:           100 * time.Millisecond,
		HeartbeatTimeout: 100 * time.Millisecond,
		Logger:           slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

func startStorageNode(t *testing.T, cfg Config) *Server {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return s
}

// acquireN acquires n keys one at a time, so that each grant is its own
// append (batch) in the log, and returns the acknowledged leases.
func acquireN(t *testing.T, s *Server, prefix string, n int) []lease.Lease {
	t.Helper()
	var acked []lease.Lease
	for i := range n {
		res, err := s.apply(context.Background(), lease.Command{Op: lease.OpAcquire, Key: fmt.Sprintf("%s/%d", prefix, i), ID: newLeaseID(), Owner: "owner", TTL: time.Hour})
		if err != nil || res.Err != nil {
			t.Fatalf("acquire: %v %v", err, res.Err)
		}
		acked = append(acked, res.Event.Lease)
	}
	return acked
}

// checkLeases fails unless every lease in want is current with its id,
// owner and token.
func checkLeases(t *testing.T, s *Server, want []lease.Lease) {
	t.Helper()
	s.fsm.Read(func(st *lease.State) {
		for _, w := range want {
			got, ok := st.Get(w.Key)
			if !ok || got.ID != w.ID || got.Token != w.Token || got.Owner != w.Owner {
				t.Errorf("%s: acknowledged lease (id %s token %d) lost: have %+v %v", w.Key, w.ID, w.Token, got, ok)
			}
		}
	})
}

func hasLease(s *Server, key string) bool {
	var ok bool
	s.fsm.Read(func(st *lease.State) { _, ok = st.Get(key) })
	return ok
}

func TestDataDirLocked(t *testing.T) {
	dir := t.TempDir()
	s := startStorageNode(t, storageConfig(dir))
	_, err := New(storageConfig(dir))
	if !errors.Is(err, raftlog.ErrDataDirInUse) || !strings.Contains(err.Error(), "data dir "+dir+" is in use by another fenced process") {
		t.Fatalf("second open of the data dir: %v, want raftlog.ErrDataDirInUse", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Closing releases the lock.
	startStorageNode(t, storageConfig(dir)).Close()
}

// writeBoltDataDir runs raft over the bbolt log store with the options of
// earlier versions, acknowledges n grants, takes a snapshot halfway, and
// returns the grants and the raft address it used.
func writeBoltDataDir(t *testing.T, dir string, n int) ([]lease.Lease, string) {
	t.Helper()
	store, err := raftboltdb.New(raftboltdb.Options{
		Path:        filepath.Join(dir, raftlog.BoltLogFileName),
		BoltOptions: &bolt.Options{Timeout: 2 * time.Second, NoFreelistSync: true, FreelistType: bolt.FreelistMapType},
	})
	if err != nil {
		t.Fatal(err)
	}
	snaps, err := raft.NewFileSnapshotStore(dir, 2, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	trans, err := raft.NewTCPTransport("127.0.0.1:0", nil, 3, 10*time.Second, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	rc := raft.DefaultConfig()
	rc.LocalID = "node1"
	rc.Logger = hclog.NewNullLogger()
	rc.HeartbeatTimeout, rc.ElectionTimeout, rc.LeaderLeaseTimeout = 100*time.Millisecond, 100*time.Millisecond, 50*time.Millisecond
	r, err := raft.NewRaft(rc, fsm.New(lease.DefaultMaxIdleKeys, fsm.Hooks{}), store, store, snaps, trans)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.BootstrapCluster(raft.Configuration{Servers: []raft.Server{{ID: rc.LocalID, Address: trans.LocalAddr()}}}).Error(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.LeaderCh():
	case <-time.After(10 * time.Second):
		t.Fatal("bolt node did not become leader")
	}
	var acked []lease.Lease
	for i := range n {
		c := lease.Command{Op: lease.OpAcquire, Key: fmt.Sprintf("old/%d", i), ID: newLeaseID(), Owner: "old-owner", TTL: time.Hour}
		data, _ := c.MarshalBinary()
		f := r.Apply(data, 0)
		if err := f.Error(); err != nil {
			t.Fatal(err)
		}
		acked = append(acked, f.Response().(lease.Result).Event.Lease)
		if i == n/2 {
			if err := r.Snapshot().Error(); err != nil {
				t.Fatal(err)
			}
		}
	}
	addr := string(trans.LocalAddr())
	if err := r.Shutdown().Error(); err != nil {
		t.Fatal(err)
	}
	trans.Close()
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	return acked, addr
}

func TestMigrateBoltDataDir(t *testing.T) {
	dir := t.TempDir()
	acked, addr := writeBoltDataDir(t, dir, 40)
	// Leftovers of a migration that crashed before its rename are ignored.
	if err := os.MkdirAll(filepath.Join(dir, raftlog.WALDirName+raftlog.MigratingSuffix), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, raftlog.WALDirName+raftlog.MigratingSuffix, "junk.wal"), []byte("junk"), 0o600); err != nil {
		t.Fatal(err)
	}

	cfg := storageConfig(dir)
	cfg.RaftListen = addr
	s := startStorageNode(t, cfg)
	checkLeases(t, s, acked)
	if _, err := os.Stat(filepath.Join(dir, raftlog.BoltLogFileName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("raft.db still in place after the migration: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, raftlog.BoltLogFileName+raftlog.MigratedSuffix)); err != nil {
		t.Errorf("raft.db.migrated: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, raftlog.WALDirName+raftlog.MigratingSuffix)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("migration directory left behind: %v", err)
	}
	// The term and vote were copied: raft's term only grows.
	term := s.raft.CurrentTerm()
	if term < 2 {
		t.Errorf("term %d after migrating a log written in term 1", term)
	}
	// New grants continue from the migrated log, and all survive a restart
	// on the WAL alone.
	more := acquireN(t, s, "new", 5)
	if more[0].Token <= acked[len(acked)-1].Token {
		t.Errorf("token %d after migration, not above %d", more[0].Token, acked[len(acked)-1].Token)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = startStorageNode(t, cfg)
	checkLeases(t, s, append(acked, more...))
}

// TestMigrationFinishesAfterCrash: a crash after the WAL was renamed into
// place but before raft.db was renamed leaves both; the WAL is complete and
// is used.
func TestMigrationFinishesAfterCrash(t *testing.T) {
	dir := t.TempDir()
	acked, addr := writeBoltDataDir(t, dir, 10)
	old := filepath.Join(dir, raftlog.BoltLogFileName)
	b, err := os.ReadFile(old)
	if err != nil {
		t.Fatal(err)
	}
	cfg := storageConfig(dir)
	cfg.RaftListen = addr
	s := startStorageNode(t, cfg)
	more := acquireN(t, s, "new", 3)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(old, b, 0o600); err != nil {
		t.Fatal(err)
	}
	s = startStorageNode(t, cfg)
	checkLeases(t, s, append(acked, more...))
}

// tailSegment returns the path of the WAL's last segment.
func tailSegment(t *testing.T, dir string) string {
	t.Helper()
	var meta metadb.BoltMetaDB
	st, err := meta.Load(filepath.Join(dir, raftlog.WALDirName))
	meta.Close()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, raftlog.WALDirName, segment.FileName(st.Segments[len(st.Segments)-1]))
}

// openLastEntry opens the WAL of the node in dir, whose caller closes it
// and meta, and reads its last entry.
func openLastEntry(t *testing.T, dir string) (*wal.WAL, *metadb.BoltMetaDB, raft.Log) {
	t.Helper()
	w, meta, err := raftlog.OpenWAL(filepath.Join(dir, raftlog.WALDirName), hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	last, err := w.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	var l raft.Log
	if err := w.GetLog(last, &l); err != nil {
		t.Fatal(err)
	}
	return w, meta, l
}

// appendUnacknowledged writes one grant to the log as the leader would,
// but with no one told: a crash during this write is what leaves a torn
// tail. It returns the segment and the offset of the entry's frame.
func appendUnacknowledged(t *testing.T, dir, key string) (string, int64) {
	t.Helper()
	w, meta, prev := openLastEntry(t, dir)
	last := prev.Index
	c := lease.Command{Op: lease.OpAcquire, Key: key, ID: newLeaseID(), Owner: "nobody-told", TTL: time.Hour}
	data, _ := c.MarshalBinary()
	if err := w.StoreLogs([]*raft.Log{{Index: last + 1, Term: prev.Term, Type: raft.LogCommand, Data: data}}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	meta.Close()
	seg := tailSegment(t, dir)
	b, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	entries, _ := raftlog.CommittedFrames(b)
	return seg, entries[len(entries)-1]
}

func flipByte(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b [1]byte
	if _, err := f.ReadAt(b[:], off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x5a
	if _, err := f.WriteAt(b[:], off); err != nil {
		t.Fatal(err)
	}
}

// TestTornTail: damage confined to the last append, the one a crash can
// tear, costs only that append, which was never acknowledged; the node
// starts with every acknowledged grant. (raft-wal cannot tell a torn last
// append from one damaged after it was acknowledged; see
// docs/data-directory.md.)
func TestTornTail(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, seg string, off int64)
	}{
		{"truncated mid-record", func(t *testing.T, seg string, off int64) {
			if err := os.Truncate(seg, off+raftlog.FrameHeaderLen+3); err != nil {
				t.Fatal(err)
			}
		}},
		{"flipped byte in the last record", func(t *testing.T, seg string, off int64) {
			flipByte(t, seg, off+raftlog.FrameHeaderLen+5)
		}},
		{"flipped byte in the last record's header", func(t *testing.T, seg string, off int64) {
			flipByte(t, seg, off)
		}},
		{"last commit frame zeroed", func(t *testing.T, seg string, off int64) {
			b, err := os.ReadFile(seg)
			if err != nil {
				t.Fatal(err)
			}
			_, end := raftlog.CommittedFrames(b)
			f, err := os.OpenFile(seg, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteAt(make([]byte, raftlog.FrameHeaderLen), end-raftlog.FrameHeaderLen); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s := startStorageNode(t, storageConfig(dir))
			acked := acquireN(t, s, "k", 30)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			seg, off := appendUnacknowledged(t, dir, "torn")
			tc.damage(t, seg, off)

			s = startStorageNode(t, storageConfig(dir))
			checkLeases(t, s, acked)
			if hasLease(s, "torn") {
				t.Error("the damaged, unacknowledged grant was applied")
			}
			// The log goes on after the dropped append.
			more := acquireN(t, s, "after", 3)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = startStorageNode(t, storageConfig(dir))
			checkLeases(t, s, append(acked, more...))
		})
	}
}

// TestCorruptMiddleRefused: damage before the last append cannot be a torn
// write, and later appends may have been acknowledged: the node refuses to
// start instead of dropping them.
func TestCorruptMiddleRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		at   func(entries []int64) int64
	}{
		{"record payload", func(entries []int64) int64 { return entries[10] + raftlog.FrameHeaderLen + 5 }},
		{"record header", func(entries []int64) int64 { return entries[10] }},
		{"record length", func(entries []int64) int64 { return entries[10] + 4 }},
		{"commit frame", func(entries []int64) int64 { return entries[11] - raftlog.FrameHeaderLen + 5 }},
		{"second-to-last commit frame", func(entries []int64) int64 {
			return entries[len(entries)-1] - raftlog.FrameHeaderLen
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s := startStorageNode(t, storageConfig(dir))
			acquireN(t, s, "k", 30)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			seg := tailSegment(t, dir)
			b, err := os.ReadFile(seg)
			if err != nil {
				t.Fatal(err)
			}
			entries, _ := raftlog.CommittedFrames(b)
			flipByte(t, seg, tc.at(entries))

			_, err = New(storageConfig(dir))
			var ce *raftlog.CorruptLogError
			if !errors.Is(err, raftlog.ErrCorruptLog) || !errors.As(err, &ce) || ce.Segment != seg {
				t.Fatalf("start on a log damaged in the middle: %v, want a CorruptLogError for %s", err, seg)
			}
			if !strings.Contains(err.Error(), "restore the data directory") {
				t.Errorf("error does not say what to do: %v", err)
			}
			// Refusing left the directory unlocked and unchanged.
			if _, err := New(storageConfig(dir)); !errors.Is(err, raftlog.ErrCorruptLog) {
				t.Errorf("second start: %v", err)
			}
		})
	}
}

// failingLogStore fails every append once told to, like a disk whose
// write or fsync returns EIO.
type failingLogStore struct {
	raft.LogStore
	failing atomic.Bool
	calls   atomic.Int32 // appends attempted while failing
}

var errInjected = errors.New("injected: fsync: input/output error")

func (s *failingLogStore) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

func (s *failingLogStore) StoreLogs(logs []*raft.Log) error {
	if s.failing.Load() {
		s.calls.Add(1)
		return errInjected
	}
	return s.LogStore.StoreLogs(logs)
}

// TestLogWriteFailureStopsNode: once an append fails, nothing more is
// acknowledged or retried; the node stops, and Serve and Close say why.
func TestLogWriteFailureStopsNode(t *testing.T) {
	dir := t.TempDir()
	fail := &failingLogStore{}
	cfg := storageConfig(dir)
	cfg.wrapLogStore = func(ls raft.LogStore) raft.LogStore { fail.LogStore = ls; return fail }
	s := startStorageNode(t, cfg)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.ServeListener(context.Background(), ln) }()
	acked := acquireN(t, s, "before", 3)

	fail.failing.Store(true)
	res, err := s.apply(context.Background(), lease.Command{Op: lease.OpAcquire, Key: "during", ID: newLeaseID(), Owner: "o", TTL: time.Hour})
	if err == nil {
		t.Fatalf("acquisition acknowledged although its append failed: %+v", res)
	}
	// raft passes the store's error on as text only.
	if !strings.Contains(err.Error(), raftlog.ErrLogWrite.Error()) || !strings.Contains(err.Error(), errInjected.Error()) {
		t.Errorf("acquisition error %v, want raftlog.ErrLogWrite and the write error", err)
	}
	select {
	case err := <-served:
		if !errors.Is(err, raftlog.ErrLogWrite) {
			t.Errorf("Serve returned %v, want raftlog.ErrLogWrite", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("node still serving 10s after its log write failed")
	}
	if s.Ready() {
		t.Error("node ready after its log write failed")
	}
	if _, err := s.apply(context.Background(), lease.Command{Op: lease.OpAcquire, Key: "later", ID: newLeaseID(), Owner: "o", TTL: time.Hour}); err == nil {
		t.Error("acquisition acknowledged after the node stopped")
	}
	if err := s.Close(); !errors.Is(err, raftlog.ErrLogWrite) {
		t.Errorf("Close returned %v, want raftlog.ErrLogWrite", err)
	}
	// The failed write was not retried: raft stepped down and re-elected
	// itself meanwhile, and its appends never reached the disk again.
	if n := fail.calls.Load(); n != 1 {
		t.Errorf("%d appends reached the failing disk, want 1", n)
	}

	s = startStorageNode(t, storageConfig(dir))
	checkLeases(t, s, acked)
	if hasLease(s, "during") {
		t.Error("the grant whose append failed is current after a restart")
	}
}

// TestDamagedAfterCleanShutdown: after a clean shutdown nothing can tear
// the last append, so damage there lost acknowledged entries: the node
// refuses to start. (After a crash the same damage looks like a torn write;
// see TestTornTail.)
func TestDamagedAfterCleanShutdown(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, seg string, off int64)
	}{
		{"flipped byte in the last record", func(t *testing.T, seg string, off int64) {
			flipByte(t, seg, off+raftlog.FrameHeaderLen+5)
		}},
		{"truncated mid-record", func(t *testing.T, seg string, off int64) {
			if err := os.Truncate(seg, off+raftlog.FrameHeaderLen+3); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s := startStorageNode(t, storageConfig(dir))
			acquireN(t, s, "k", 10)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			seg := tailSegment(t, dir)
			b, err := os.ReadFile(seg)
			if err != nil {
				t.Fatal(err)
			}
			entries, _ := raftlog.CommittedFrames(b)
			tc.damage(t, seg, entries[len(entries)-1])

			_, err = New(storageConfig(dir))
			if !errors.Is(err, raftlog.ErrCorruptLog) || !strings.Contains(err.Error(), "shut down cleanly") {
				t.Fatalf("start after the last acknowledged append was damaged: %v, want ErrCorruptLog", err)
			}
		})
	}
}

// TestTruncatedSuffixSurvivesRestart: a follower whose last entries conflict
// with a new leader's log deletes them ("clearing log suffix") and goes on
// from there. The segment that held them is sealed at that point, and the
// node must start on it again: raft-wal before v0.4.1 sealed it with no
// index block, so every later start failed with "sealed segment has no
// index block" (found by fencectl failover-bench).
func TestTruncatedSuffixSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	s := startStorageNode(t, storageConfig(dir))
	acked := acquireN(t, s, "k", 10)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	w, meta, prev := openLastEntry(t, dir)
	last := prev.Index
	// What raft does on a follower: drop the conflicting suffix, then
	// store the new leader's entry at the same index.
	if err := w.DeleteRange(last, last); err != nil {
		t.Fatal(err)
	}
	if err := w.StoreLogs([]*raft.Log{{Index: last, Term: prev.Term + 1, Type: raft.LogNoop}}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	meta.Close()

	s = startStorageNode(t, storageConfig(dir))
	checkLeases(t, s, acked[:len(acked)-1])
	if hasLease(s, acked[len(acked)-1].Key) {
		t.Errorf("the entry replaced by the new leader's was applied")
	}
	more := acquireN(t, s, "after", 3)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = startStorageNode(t, storageConfig(dir))
	checkLeases(t, s, append(acked[:len(acked)-1], more...))
}
