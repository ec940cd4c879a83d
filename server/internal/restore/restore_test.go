package restore

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/fencedio/fenced/lease"
	"github.com/fencedio/fenced/server/internal/peers"
	"github.com/fencedio/fenced/server/internal/raftlog"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// testBackup returns a backup at index 4 of keys a (held, token 1), b
// (released, token 2) and c (held, token 4).
func testBackup(t *testing.T) []byte {
	t.Helper()
	st := lease.New(0)
	for i, c := range []lease.Command{
		{Op: lease.OpAcquire, Key: "a", ID: "ida", Owner: "o", TTL: time.Minute},
		{Op: lease.OpAcquire, Key: "b", ID: "idb", Owner: "o", TTL: time.Minute},
		{Op: lease.OpRelease, Key: "b", ID: "idb"},
		{Op: lease.OpAcquire, Key: "c", ID: "idc", Owner: "o", TTL: time.Minute},
	} {
		if res := st.Apply(uint64(i+1), 1, c); res.Err != nil {
			t.Fatalf("apply %d: %v", i+1, res.Err)
		}
	}
	var b bytes.Buffer
	if _, err := st.Snapshot().Backup().WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// restored opens what Write left in dir: the snapshot's metadata and state,
// and the stored term.
func restored(t *testing.T, dir string) (*raft.SnapshotMeta, *lease.State, uint64) {
	t.Helper()
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	metas, err := snaps.List()
	if err != nil || len(metas) != 1 {
		t.Fatalf("%d snapshots (%v), want 1", len(metas), err)
	}
	meta, rc, err := snaps.Open(metas[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	st, err := lease.Restore(rc, 0)
	if err != nil {
		t.Fatal(err)
	}
	store, err := raftlog.Open(dir, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	term, err := store.GetUint64([]byte("CurrentTerm"))
	if err != nil {
		t.Fatal(err)
	}
	return meta, st, term
}

func servers(conf raft.Configuration) []string {
	var out []string
	for _, s := range conf.Servers {
		out = append(out, fmt.Sprintf("%s=%s/%v", s.ID, s.Address, s.Suffrage))
	}
	return out
}

// A restore writes a snapshot at the backup's index plus the bump, in a
// term as high as that index, with every lease ended and every token
// remembered, and the new membership; it never writes over raft state.
func TestWrite(t *testing.T) {
	backup := testBackup(t)
	dir := t.TempDir()
	p := Plan{DataDir: dir, NodeID: "r1", RaftAddress: "127.0.0.1:7421", Bump: 1000, StartFloor: 1}
	at, err := Write(p, bytes.NewReader(backup))
	if err != nil {
		t.Fatal(err)
	}
	if at != 4+1000 {
		t.Fatalf("restored at %d, want 4+1000", at)
	}
	meta, st, term := restored(t, dir)
	if meta.Index != at || meta.Term != at || term != at || meta.ConfigurationIndex != at {
		t.Errorf("snapshot at %d term %d (configuration at %d), stored term %d; want %d, %d, %d, %d",
			meta.Index, meta.Term, meta.ConfigurationIndex, term, at, at, at, at)
	}
	if got, want := servers(meta.Configuration), []string{"r1=127.0.0.1:7421/Voter"}; !slices.Equal(got, want) {
		t.Errorf("membership %q, want %q", got, want)
	}
	if st.Applied() != at || st.Len() != 0 {
		t.Errorf("restored state applied %d with %d leases, want %d and none", st.Applied(), st.Len(), at)
	}
	for key, token := range map[string]uint64{"a": 1, "b": 2, "c": 4} {
		if got := st.LastToken(key); got != token {
			t.Errorf("key %s remembers token %d, want %d", key, got, token)
		}
	}
	if _, err := Write(p, bytes.NewReader(backup)); !errors.Is(err, ErrTarget) {
		t.Errorf("restore over a restored directory: %v, want ErrTarget", err)
	}
}

// The start is at least the floor, and with no floor at least now; a
// member of several needs one; a bump that overflows is refused.
func TestWriteStart(t *testing.T) {
	backup := testBackup(t)
	floor := uint64(1) << 40
	three := []Member{{"a", "127.0.0.1:7421"}, {"b", "127.0.0.1:7422"}, {"c", "127.0.0.1:7423"}}
	dir := t.TempDir()
	at, err := Write(Plan{DataDir: dir, NodeID: "b", RaftAddress: "127.0.0.1:7421", InitialCluster: three,
		Bump: 1000, StartFloor: floor}, bytes.NewReader(backup))
	if err != nil || at != floor {
		t.Fatalf("restore with a floor above the bump: %d, %v; want %d", at, err, floor)
	}
	meta, _, _ := restored(t, dir)
	if got, want := servers(meta.Configuration), []string{"a=127.0.0.1:7421/Voter", "b=127.0.0.1:7422/Voter", "c=127.0.0.1:7423/Voter"}; !slices.Equal(got, want) {
		t.Errorf("membership %q, want %q", got, want)
	}

	before := uint64(time.Now().UnixMicro())
	if at, err := Write(Plan{DataDir: t.TempDir(), NodeID: "r1", Bump: 1000}, bytes.NewReader(backup)); err != nil || at < before {
		t.Errorf("restore without a floor: %d, %v; want at least now (%d)", at, err, before)
	}

	p := Plan{DataDir: t.TempDir(), NodeID: "a", InitialCluster: three, Bump: 1000}
	if err := p.Validate(); !errors.Is(err, ErrStartFloor) {
		t.Errorf("Validate of a member of three without a floor: %v, want ErrStartFloor", err)
	}
	if _, err := Write(p, bytes.NewReader(backup)); !errors.Is(err, ErrStartFloor) {
		t.Errorf("Write of a member of three without a floor: %v, want ErrStartFloor", err)
	}
	if _, err := Write(Plan{DataDir: t.TempDir(), NodeID: "r1", Bump: math.MaxUint64, StartFloor: 1}, bytes.NewReader(backup)); err == nil {
		t.Error("a bump that overflows the index was accepted")
	}
}

// Every member of one restore gets one new cluster ID that votes; a restore
// of another backup, or at another floor, gets another, so that its
// members and the old cluster's refuse each other on the peer port.
func TestWriteClusterID(t *testing.T) {
	backup := testBackup(t)
	st := lease.New(0)
	st.Apply(1, 1, lease.Command{Op: lease.OpAcquire, Key: "a", ID: "ida", Owner: "o", TTL: time.Minute})
	var buf bytes.Buffer
	if _, err := st.Snapshot().Backup().WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	other := buf.Bytes()
	three := []Member{{"a", "127.0.0.1:7421"}, {"b", "127.0.0.1:7422"}, {"c", "127.0.0.1:7423"}}
	restore := func(node string, b []byte, floor uint64) peers.Identity {
		t.Helper()
		dir := t.TempDir()
		if _, err := Write(Plan{DataDir: dir, NodeID: node, InitialCluster: three, Bump: 1000, StartFloor: floor}, bytes.NewReader(b)); err != nil {
			t.Fatal(err)
		}
		store, err := raftlog.Open(dir, hclog.NewNullLogger())
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		ident, err := peers.OpenIdentity(dir, store, true)
		if err != nil {
			t.Fatalf("the restored directory's identity: %v", err)
		}
		return ident.Get()
	}
	a, b := restore("a", backup, 1<<40), restore("b", backup, 1<<40)
	if a.Cluster == "" || a.Cluster != b.Cluster || !a.Votes || !b.Votes || a.Backup == "" || a.Backup != b.Backup || a.Instance == b.Instance {
		t.Fatalf("two members of one restore: %+v and %+v; want one cluster ID and backup digest, two instances, both voting", a, b)
	}
	if c := restore("c", other, 1<<40); c.Cluster == a.Cluster || c.Backup == a.Backup {
		t.Errorf("a member restored from another backup has cluster ID %s and digest %s, as the first restore", c.Cluster, c.Backup)
	}
	if c := restore("c", backup, 1<<41); c.Cluster == a.Cluster {
		t.Errorf("a member restored at another floor has cluster ID %s, as the first restore", c.Cluster)
	}
}
