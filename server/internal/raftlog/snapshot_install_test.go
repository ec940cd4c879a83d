package raftlog

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

	// As raft's leader does after an install: the next append follows
	// the snapshot's own entry, which the follower must still match.
	f.installSnapshot(t, 12)
	f.appendEntries(t, 12, 13, 22, 22)

	f.expectHistory(t, "1-20 restore@12 13-22")
	f.expectLog(t, "12..22", "after the snapshot at 12")
	f.close(t)

	// And the node starts again on what it wrote.
	f = startFakeLeaderFollower(t, dir)
	defer f.close(t)
	f.expectLog(t, "12..22", "after a restart")
	f.appendEntries(t, 22, 23, 23, 23)
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

	f.installSnapshot(t, 12)
	f.installSnapshot(t, 12)
	f.expectLog(t, "12..20", "after two installs at 12")
	f.appendEntries(t, 12, 13, 22, 22)
	f.expectHistory(t, "1-20 restore@12 restore@12 13-22")
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
	f.installSnapshot(t, 12)
	f.expectLog(t, "13..20", "after a second install at 12")
	f.appendEntries(t, 20, 21, 22, 22)
	f.expectHistory(t, "restore@12 13-20 restore@12 13-22")
}

// TestNewFollowerAppendsAfterSecondInstall: after each install raft's leader
// appends from the snapshot's next entry, with the snapshot's own as the
// previous one. A member added empty that is sent the same snapshot twice
// keeps a log that starts right after it; raft's follower looks the
// previous entry up in that log (it takes the snapshot's only when the
// snapshot is newer than the log), refused the append, and the leader sent
// the snapshot again, forever.
func TestNewFollowerAppendsAfterSecondInstall(t *testing.T) {
	dir := t.TempDir()
	f := startFakeLeaderFollower(t, dir)

	f.installSnapshot(t, 12)
	f.appendEntries(t, 12, 13, 20, 20)
	f.installSnapshot(t, 12)
	f.appendEntries(t, 12, 13, 22, 22)
	f.expectHistory(t, "restore@12 13-20 restore@12 13-22")
	f.close(t)

	// A restarted node answers for the snapshot's entry too.
	f = startFakeLeaderFollower(t, dir)
	defer f.close(t)
	f.appendEntries(t, 12, 13, 23, 23)
}

// TestRestartedFollowerTruncatesConflictAfterSnapshot: a node that restarts
// restores its last snapshot, at S, and may hold entries after it that were
// never committed. A new leader's entries conflict with them from S+1, and
// raft deletes the log from there before appending its own. That deletion
// must happen: the raft#697 workaround took the snapshot restored at start
// for one just installed, kept the log, and the append that followed was
// refused as out of order, which stops the node on every start (found with
// the cluster torture: "delete of entries 7 to 7: only suffix or prefix
// ranges may be deleted").
func TestRestartedFollowerTruncatesConflictAfterSnapshot(t *testing.T) {
	dir := t.TempDir()
	f := startFakeLeaderFollower(t, dir)
	f.appendEntries(t, 0, 1, 20, 12) // 13..20 are not committed
	f.installSnapshot(t, 12)         // a snapshot at 12 on disk, the log 12..20 kept
	f.close(t)

	f = startFakeLeaderFollower(t, dir)
	defer f.close(t)
	f.appendInTerm(t, 2, 12, 13, 15, 15)
	f.expectHistory(t, "restore@12 13-15")
	f.expectLog(t, "12..15", "after the new leader's append")
	var l raft.Log
	if err := f.logs.GetLog(13, &l); err != nil || l.Term != 2 {
		t.Errorf("entry 13: term %d (%v), want the new leader's term 2", l.Term, err)
	}
}

// TestFollowerTruncatesConflictAfterOlderSnapshot: after installing a
// snapshot older than its log, a follower keeps the entries after it; a
// leader's append that conflicts with them replaces them.
func TestFollowerTruncatesConflictAfterOlderSnapshot(t *testing.T) {
	f := startFakeLeaderFollower(t, t.TempDir())
	defer f.close(t)
	f.appendEntries(t, 0, 1, 20, 12)
	f.installSnapshot(t, 12)
	f.appendInTerm(t, 2, 12, 13, 15, 15)
	f.expectHistory(t, "1-12 restore@12 13-15")
	f.expectLog(t, "12..15", "after the new leader's append")
}

// TestFollowerAppendsAfterSnapshotOfAnotherTerm: a follower may hold
// entries that were never committed where a new leader's snapshot ends; the
// entry at the snapshot's index is then of another term than the
// snapshot's. Those entries conflict with the snapshot and must go, but
// raft v1.7.2 keeps its last index from before the install
// (hashicorp/raft#697): it refused every append that followed, as it
// looked up entries it believed it held and the log no longer had, and the
// leader sent the snapshot again until the follower restarted.
func TestFollowerAppendsAfterSnapshotOfAnotherTerm(t *testing.T) {
	dir := t.TempDir()
	f := startFakeLeaderFollower(t, dir)

	f.appendEntries(t, 0, 1, 20, 10) // 11..20 of term 1 are not committed

	// A leader of term 2 whose entry 12 is of term 2.
	f.installSnapshotOf(t, 2, 12, 2)
	var l raft.Log
	for i := uint64(11); i <= 20; i++ {
		if err := f.logs.GetLog(i, &l); err == nil && l.Term == 1 {
			t.Fatalf("entry %d of term 1 survived a snapshot of term 2 at 12", i)
		}
	}
	f.appendAfter(t, 2, 12, 2, 13, 15, 15)
	f.expectHistory(t, "1-10 restore@12 13-15")
	f.expectLog(t, "13..15", "after the append that followed the snapshot")
	if last := f.raft.LastIndex(); last != 15 {
		t.Errorf("raft's last index is %d, the log's 15", last)
	}
	// The leader sends a newer snapshot, and then appends after it.
	f.installSnapshotOf(t, 2, 18, 2)
	f.appendAfter(t, 2, 18, 2, 19, 22, 22)
	f.expectHistory(t, "1-10 restore@12 13-15 restore@18 19-22")
	f.close(t)

	f = startFakeLeaderFollower(t, dir)
	defer f.close(t)
	f.appendAfter(t, 2, 22, 2, 23, 23, 23)
}

// TestFollowerAppendsAfterTwoSnapshotsOfAnotherTerm: the leader may send a
// second, newer, snapshot before any append went through after the first;
// its index lies among the entries raft believes it still holds.
func TestFollowerAppendsAfterTwoSnapshotsOfAnotherTerm(t *testing.T) {
	f := startFakeLeaderFollower(t, t.TempDir())
	defer f.close(t)

	f.appendEntries(t, 0, 1, 20, 10)
	f.installSnapshotOf(t, 2, 12, 2)
	f.installSnapshotOf(t, 2, 15, 2)
	f.appendAfter(t, 2, 15, 2, 16, 17, 17)
	f.expectHistory(t, "1-10 restore@12 restore@15 16-17")
	f.expectLog(t, "16..17", "after the append that followed the second snapshot")
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
	if err := os.MkdirAll(filepath.Join(dir, WALDirName), 0o700); err != nil {
		t.Fatal(err)
	}
	w, meta, err := OpenWAL(filepath.Join(dir, WALDirName), hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	snaps, err := raft.NewFileSnapshotStore(dir, 2, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	restored := new(RestoredSnapshot)
	logs := Monotonic{LogStore: Compacted{w}, Restored: restored, Snaps: snaps, Log: hclog.NewNullLogger()}

	_, follower := raft.NewInmemTransport("follower")
	_, leader := raft.NewInmemTransport("leader")
	leader.Connect("follower", follower)
	follower.Connect("leader", leader)

	rc := raft.DefaultConfig()
	rc.LocalID = "follower"
	rc.Logger = hclog.NewNullLogger()
	rc.SnapshotThreshold = 1 << 30 // only the test's snapshots
	fsm := &indexFSM{applied: make(chan struct{}, 1)}
	r, err := raft.NewRaft(rc, fsm, logs, w, TrackRestores{SnapshotStore: snaps, Restored: restored}, follower)
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

// expectLog checks that the follower's log holds want, "first..last",
// after what the test just did.
func (f *fakeLeaderFollower) expectLog(t *testing.T, want, after string) {
	t.Helper()
	first, _ := f.logs.FirstIndex()
	last, _ := f.logs.LastIndex()
	if got := fmt.Sprintf("%d..%d", first, last); got != want {
		t.Errorf("log holds %s %s, want %s", got, after, want)
	}
}

// expectHistory checks what raft did to the state machine so far.
func (f *fakeLeaderFollower) expectHistory(t *testing.T, want string) {
	t.Helper()
	if got := f.fsm.history(); got != want {
		t.Errorf("state machine saw %s, want %s", got, want)
	}
}

// appendEntries appends entries of term 1 and waits until the state
// machine has applied up to commit.
func (f *fakeLeaderFollower) appendEntries(t *testing.T, prev, from, to, commit uint64) {
	t.Helper()
	f.appendInTerm(t, 1, prev, from, to, commit)
}

// appendInTerm appends entries of term after prev, an entry of term 1, and
// waits until the state machine has applied up to commit.
func (f *fakeLeaderFollower) appendInTerm(t *testing.T, term, prev, from, to, commit uint64) {
	t.Helper()
	f.appendAfter(t, term, prev, 1, from, to, commit)
}

// appendAfter appends entries of term after prev, an entry of prevTerm,
// and waits until the state machine has applied up to commit.
func (f *fakeLeaderFollower) appendAfter(t *testing.T, term, prev, prevTerm, from, to, commit uint64) {
	t.Helper()
	req := &raft.AppendEntriesRequest{RPCHeader: fakeLeaderHeader, Term: term,
		PrevLogEntry: prev, LeaderCommitIndex: commit}
	if prev > 0 {
		req.PrevLogTerm = prevTerm
	}
	for i := from; i <= to; i++ {
		req.Entries = append(req.Entries, &raft.Log{Index: i, Term: term, Type: raft.LogCommand, Data: []byte("x")})
	}
	var resp raft.AppendEntriesResponse
	if err := f.leader.AppendEntries("follower", "follower", req, &resp); err != nil || !resp.Success {
		t.Fatalf("append %d..%d after %d: %v, success %v", from, to, prev, err, resp.Success)
	}
	f.fsm.waitApplied(t, commit)
}

func (f *fakeLeaderFollower) installSnapshot(t *testing.T, index uint64) {
	t.Helper()
	f.installSnapshotOf(t, 1, index, 1)
}

// installSnapshotOf installs, as a leader of term does, a snapshot whose
// last entry is index, of lastTerm.
func (f *fakeLeaderFollower) installSnapshotOf(t *testing.T, term, index, lastTerm uint64) {
	t.Helper()
	data := binary.BigEndian.AppendUint64(nil, index)
	conf := raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: "leader", Address: "leader"}}}
	req := &raft.InstallSnapshotRequest{RPCHeader: fakeLeaderHeader, SnapshotVersion: 1, Term: term,
		LastLogIndex: index, LastLogTerm: lastTerm, Configuration: raft.EncodeConfiguration(conf),
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

// TestOnlyAnInstallKeepsTheLog: the log store cuts short only the deletion
// of the whole log right after an install; the snapshot a node restores at
// start, or opens to send, changes no deletion.
func TestOnlyAnInstallKeepsTheLog(t *testing.T) {
	// Each leaves a snapshot at 12 opened.
	install := func(t *testing.T, snaps raft.SnapshotStore, tracked TrackRestores) {
		openSnapshot(t, tracked, createSnapshot(t, tracked, 12))
	}
	restoredAtStart := func(t *testing.T, snaps raft.SnapshotStore, tracked TrackRestores) {
		openSnapshot(t, tracked, createSnapshot(t, snaps, 12)) // created by the process before
	}
	installWhileTaking := func(t *testing.T, snaps raft.SnapshotStore, tracked TrackRestores) {
		installed := createSnapshot(t, tracked, 12)
		createSnapshot(t, tracked, 11) // the node's own, taken while it copies
		openSnapshot(t, tracked, installed)
	}
	installedThenSent := func(t *testing.T, snaps raft.SnapshotStore, tracked TrackRestores) {
		installed := createSnapshot(t, tracked, 12)
		openSnapshot(t, tracked, installed)
		tracked.Restored.forget() // as the next append does
		openSnapshot(t, tracked, installed)
	}
	sentThenTaken := func(t *testing.T, snaps raft.SnapshotStore, tracked TrackRestores) {
		openSnapshot(t, tracked, createSnapshot(t, tracked, 12))
		createSnapshot(t, tracked, 30)
	}
	for _, tc := range []struct {
		name           string
		snapshots      func(t *testing.T, snaps raft.SnapshotStore, tracked TrackRestores)
		from, to       uint64 // the log
		delFrom, delTo uint64
		want           string // the log after the deletion
	}{
		{"install, log from before", install, 1, 20, 1, 20, "12..20"},
		{"install, log from after", install, 13, 20, 13, 20, "13..20"},
		{"install, log past a gap", install, 14, 20, 14, 20, "0..0"},
		{"install, log before", install, 1, 12, 1, 12, "0..0"},
		{"install while taking one", installWhileTaking, 1, 20, 1, 20, "12..20"},
		// An install, or a snapshot of the node's own opened to send.
		{"opened, conflict", install, 1, 20, 13, 20, "1..12"},
		{"restored at start, conflict", restoredAtStart, 13, 20, 13, 20, "0..0"},
		{"installed then sent, conflict", installedThenSent, 13, 20, 13, 20, "0..0"},
		{"sent, then a newer taken and compacted", sentThenTaken, 1, 40, 1, 25, "26..40"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			restored := new(RestoredSnapshot)
			snaps, err := raft.NewFileSnapshotStore(t.TempDir(), 2, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			tc.snapshots(t, snaps, TrackRestores{SnapshotStore: snaps, Restored: restored})
			store := raft.NewInmemStore()
			for i := tc.from; i <= tc.to; i++ {
				if err := store.StoreLog(&raft.Log{Index: i, Term: 1}); err != nil {
					t.Fatal(err)
				}
			}
			logs := Monotonic{LogStore: store, Restored: restored, Log: hclog.NewNullLogger()}
			if err := logs.DeleteRange(tc.delFrom, tc.delTo); err != nil {
				t.Fatal(err)
			}
			first, _ := logs.FirstIndex()
			last, _ := logs.LastIndex()
			if got := fmt.Sprintf("%d..%d", first, last); got != tc.want {
				t.Errorf("deleting %d..%d of %d..%d left %s, want %s", tc.delFrom, tc.delTo, tc.from, tc.to, got, tc.want)
			}
			if _, ok := restored.take(); ok {
				t.Error("the snapshot is still remembered after a deletion")
			}
		})
	}
}

func createSnapshot(t *testing.T, snaps raft.SnapshotStore, index uint64) string {
	t.Helper()
	sink, err := snaps.Create(raft.SnapshotVersionMax, index, 1, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	return sink.ID()
}

func openSnapshot(t *testing.T, snaps raft.SnapshotStore, id string) {
	t.Helper()
	_, rc, err := snaps.Open(id)
	if err != nil {
		t.Fatal(err)
	}
	rc.Close()
}
