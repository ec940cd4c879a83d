package server

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// TestFollowerKeepsLogPastOlderSnapshot: a leader that compacted the entry a
// follower needs next sends it a snapshot, and may send one older than the
// follower's last entry. The follower must keep the entries after the
// snapshot and apply them again on top of it. hashicorp/raft v1.7.2 empties
// the whole log of a monotonic store instead (hashicorp/raft#697) and then
// panics with "log not found" at its next commit and on every start after
// (found by CI's cluster torture run, on a member added back empty).
func TestFollowerKeepsLogPastOlderSnapshot(t *testing.T) {
	dir := t.TempDir()
	f := startFakeLeaderFollower(t, dir)

	f.appendEntries(t, 0, 1, 20, 20)
	f.fsm.waitApplied(t, 20)

	// As raft's leader does after an install: the next append follows
	// the snapshot's own entry, which the follower must still match.
	f.installSnapshot(t, 12)
	f.appendEntries(t, 12, 13, 22, 22)
	f.fsm.waitApplied(t, 22)

	if got, want := f.fsm.history(), "1-20 restore@12 13-22"; got != want {
		t.Errorf("state machine saw %s, want %s", got, want)
	}
	first, _ := f.logs.FirstIndex()
	last, _ := f.logs.LastIndex()
	if first != 12 || last != 22 {
		t.Errorf("log holds %d..%d after the snapshot at 12, want 12..22", first, last)
	}
	f.close(t)

	// And the node starts again on what it wrote.
	f = startFakeLeaderFollower(t, dir)
	defer f.close(t)
	first, _ = f.logs.FirstIndex()
	last, _ = f.logs.LastIndex()
	if first != 12 || last != 22 {
		t.Errorf("log holds %d..%d after a restart, want 12..22", first, last)
	}
	f.appendEntries(t, 22, 23, 23, 23)
	f.fsm.waitApplied(t, 23)
}

// TestFollowerKeepsLogPastTwoInstalls: a leader may send the same older
// snapshot twice (its append after the first install was lost, or refused).
// The second install must keep the log too: deleting it while raft still
// believes its last index is the old one brings back "log not found".
func TestFollowerKeepsLogPastTwoInstalls(t *testing.T) {
	dir := t.TempDir()
	f := startFakeLeaderFollower(t, dir)
	defer f.close(t)

	f.appendEntries(t, 0, 1, 20, 20)
	f.fsm.waitApplied(t, 20)

	f.installSnapshot(t, 12)
	f.installSnapshot(t, 12)
	first, _ := f.logs.FirstIndex()
	last, _ := f.logs.LastIndex()
	if first != 12 || last != 20 {
		t.Fatalf("log holds %d..%d after two installs at 12, want 12..20", first, last)
	}
	f.appendEntries(t, 12, 13, 22, 22)
	f.fsm.waitApplied(t, 22)
	if got, want := f.fsm.history(), "1-20 restore@12 restore@12 13-22"; got != want {
		t.Errorf("state machine saw %s, want %s", got, want)
	}
}

// TestNewFollowerKeepsLogPastSecondInstall: a member added empty installs
// the leader's snapshot, appends the entries after it, and may be sent the
// same snapshot again. Its log then starts right after the snapshot, with
// no entry of the snapshot's own; the second install must keep it too (the
// member re-added after a disk loss crash-looped on "log not found" in a
// cluster torture run).
func TestNewFollowerKeepsLogPastSecondInstall(t *testing.T) {
	dir := t.TempDir()
	f := startFakeLeaderFollower(t, dir)
	defer f.close(t)

	f.installSnapshot(t, 12)
	f.appendEntries(t, 12, 13, 20, 20)
	f.fsm.waitApplied(t, 20)
	f.installSnapshot(t, 12)
	first, _ := f.logs.FirstIndex()
	last, _ := f.logs.LastIndex()
	if first != 13 || last != 20 {
		t.Fatalf("log holds %d..%d after a second install at 12, want 13..20", first, last)
	}
	f.appendEntries(t, 20, 21, 22, 22)
	f.fsm.waitApplied(t, 22)
	if got, want := f.fsm.history(), "restore@12 13-20 restore@12 13-22"; got != want {
		t.Errorf("state machine saw %s, want %s", got, want)
	}
}

// fakeLeaderFollower is one raft node on the node's own log store chain,
// driven by RPCs that a test writes as a leader would.
type fakeLeaderFollower struct {
	raft   *raft.Raft
	logs   raft.LogStore
	fsm    *indexFSM
	leader *raft.InmemTransport
	close  func(t *testing.T)
}

func startFakeLeaderFollower(t *testing.T, dir string) *fakeLeaderFollower {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, walDirName), 0o700); err != nil {
		t.Fatal(err)
	}
	w, meta, err := openWAL(filepath.Join(dir, walDirName), hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	snaps, err := raft.NewFileSnapshotStore(dir, 2, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	restored := new(restoredSnapshot)
	logs := monotonicLogStore{LogStore: compactedLogStore{w}, restored: restored, log: hclog.NewNullLogger()}

	_, follower := raft.NewInmemTransport("follower")
	_, leader := raft.NewInmemTransport("leader")
	leader.Connect("follower", follower)
	follower.Connect("leader", leader)

	rc := raft.DefaultConfig()
	rc.LocalID = "follower"
	rc.Logger = hclog.NewNullLogger()
	rc.SnapshotThreshold = 1 << 30 // only the test's snapshots
	fsm := &indexFSM{applied: make(chan struct{}, 1)}
	r, err := raft.NewRaft(rc, fsm, logs, w, restoreTrackingSnapshots{snaps, restored}, follower)
	if err != nil {
		t.Fatal(err)
	}
	return &fakeLeaderFollower{raft: r, logs: logs, fsm: fsm, leader: leader, close: func(t *testing.T) {
		if err := r.Shutdown().Error(); err != nil {
			t.Error(err)
		}
		w.Close()
		meta.Close()
	}}
}

var fakeLeaderHeader = raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("leader"), Addr: []byte("leader")}

func (f *fakeLeaderFollower) appendEntries(t *testing.T, prev, from, to, commit uint64) {
	t.Helper()
	req := &raft.AppendEntriesRequest{RPCHeader: fakeLeaderHeader, Term: 1,
		PrevLogEntry: prev, LeaderCommitIndex: commit}
	if prev > 0 {
		req.PrevLogTerm = 1
	}
	for i := from; i <= to; i++ {
		req.Entries = append(req.Entries, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: []byte("x")})
	}
	var resp raft.AppendEntriesResponse
	if err := f.leader.AppendEntries("follower", "follower", req, &resp); err != nil || !resp.Success {
		t.Fatalf("append %d..%d after %d: %v, success %v", from, to, prev, err, resp.Success)
	}
}

func (f *fakeLeaderFollower) installSnapshot(t *testing.T, index uint64) {
	t.Helper()
	data := binary.BigEndian.AppendUint64(nil, index)
	conf := raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: "leader", Address: "leader"}}}
	req := &raft.InstallSnapshotRequest{RPCHeader: fakeLeaderHeader, SnapshotVersion: 1, Term: 1,
		LastLogIndex: index, LastLogTerm: 1, Configuration: raft.EncodeConfiguration(conf),
		ConfigurationIndex: 1, Size: int64(len(data))}
	var resp raft.InstallSnapshotResponse
	if err := f.leader.InstallSnapshot("follower", "follower", req, &resp, bytes.NewReader(data)); err != nil || !resp.Success {
		t.Fatalf("install snapshot at %d: %v, success %v", index, err, resp.Success)
	}
}

// indexFSM's state is the index of the last entry applied; it keeps a
// history of what raft did to it: runs of consecutive entries applied, and
// restores.
type indexFSM struct {
	mu      sync.Mutex
	last    uint64
	events  []string
	runFrom uint64 // first index of the run being applied, 0 for none
	applied chan struct{}
}

func (m *indexFSM) Apply(l *raft.Log) any {
	m.mu.Lock()
	if m.runFrom == 0 || l.Index != m.last+1 {
		m.endRun()
		m.runFrom = l.Index
	}
	m.last = l.Index
	m.mu.Unlock()
	select {
	case m.applied <- struct{}{}:
	default:
	}
	return nil
}

func (m *indexFSM) endRun() {
	if m.runFrom != 0 {
		m.events = append(m.events, fmt.Sprintf("%d-%d", m.runFrom, m.last))
		m.runFrom = 0
	}
}

func (m *indexFSM) Snapshot() (raft.FSMSnapshot, error) {
	return nil, errors.New("the test takes no snapshot")
}

func (m *indexFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var b [8]byte
	if _, err := io.ReadFull(rc, b[:]); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.endRun()
	m.last = binary.BigEndian.Uint64(b[:])
	m.events = append(m.events, fmt.Sprintf("restore@%d", m.last))
	return nil
}

func (m *indexFSM) history() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	events := m.events
	if m.runFrom != 0 {
		events = append(events[:len(events):len(events)], fmt.Sprintf("%d-%d", m.runFrom, m.last))
	}
	return strings.Join(events, " ")
}

func (m *indexFSM) waitApplied(t *testing.T, index uint64) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		m.mu.Lock()
		last := m.last
		m.mu.Unlock()
		if last >= index {
			return
		}
		select {
		case <-m.applied:
		case <-timeout:
			t.Fatalf("state machine at %d, want %d", last, index)
		}
	}
}

// TestRestoredSnapshotKeepsOnlyAfterARestore: a snapshot that a leader opens
// to send, followed by its own snapshot and compaction, leaves compaction
// alone; only a deletion past a snapshot opened since the last one created
// is cut short.
func TestRestoredSnapshotKeepsOnlyAfterARestore(t *testing.T) {
	restored := new(restoredSnapshot)
	snaps := restoreTrackingSnapshots{raft.NewInmemSnapshotStore(), restored}
	create := func(index uint64) string {
		sink, err := snaps.Create(raft.SnapshotVersionMax, index, 1, raft.Configuration{}, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := sink.Close(); err != nil {
			t.Fatal(err)
		}
		return sink.ID()
	}
	open := func(id string) {
		_, rc, err := snaps.Open(id)
		if err != nil {
			t.Fatal(err)
		}
		rc.Close()
	}

	sent := create(10)
	open(sent) // a leader sends its snapshot at 10
	create(30) // then takes one at 30 and compacts
	if _, ok := restored.take(1, 25); ok {
		t.Error("a compaction after the node's own snapshot was cut short")
	}

	installed := create(12) // a follower installs a snapshot at 12
	open(installed)
	if _, ok := restored.take(1, 12); ok {
		t.Error("a deletion up to the snapshot was cut short")
	}
	if meta, ok := restored.take(1, 20); !ok || meta.Index != 12 {
		t.Errorf("deleting past the restored snapshot at 12: kept %v (%d)", ok, meta.Index)
	}
	if _, ok := restored.take(1, 20); ok {
		t.Error("the restored snapshot cut short a second deletion")
	}
}
