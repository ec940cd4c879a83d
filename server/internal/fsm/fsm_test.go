package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/fencedio/fenced/lease"
	"github.com/hashicorp/raft"
)

type bufSink struct{ bytes.Buffer }

func (*bufSink) ID() string    { return "test" }
func (*bufSink) Cancel() error { return nil }
func (*bufSink) Close() error  { return nil }

func snapshotBytes(t *testing.T, f *FSM) []byte {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var sink bufSink
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	return sink.Bytes()
}

// leaseID returns a lease ID (32 lower-case hex digits) of n.
func leaseID(n int) string { return fmt.Sprintf("%032x", n) }

func entry(t *testing.T, index uint64, c lease.Command) *raft.Log {
	t.Helper()
	data, err := c.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return &raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: data}
}

// The state machine hands on the transitions of one applied batch
// together, in log order: what lets a server gather their records.
func TestFSMHandsOnABatchTogether(t *testing.T) {
	var batches [][]lease.Event
	f := New(0, Hooks{Events: func(events []lease.Event) { batches = append(batches, append([]lease.Event(nil), events...)) }})
	var logs []*raft.Log
	for i := range 3 {
		c := lease.Command{Op: lease.OpAcquire, Key: fmt.Sprintf("k%d", i), ID: leaseID(i), Owner: "o", TTL: time.Minute}
		logs = append(logs, entry(t, uint64(i+1), c))
	}
	f.ApplyBatch(logs)
	if len(batches) != 1 || len(batches[0]) != 3 {
		t.Fatalf("onEvents calls %v, want one call with 3 transitions", batches)
	}
	for i, ev := range batches[0] {
		if want := fmt.Sprintf("k%d", i); ev.Type != lease.Acquired || ev.Lease.Key != want {
			t.Fatalf("transition %d: %v of %q, want an acquisition of %q", i, ev.Type, ev.Lease.Key, want)
		}
	}
}

// The hooks are called in their order around a batch, Events with the
// state unlocked (it may read the FSM), and ApplyBatch answers each entry:
// a command its lease.Result, an undecodable one a Result with Err, other
// entries nil.
func TestApplyBatchResultsAndHooks(t *testing.T) {
	var calls []string
	var f *FSM
	f = New(0, Hooks{
		BeforeApply: func() { calls = append(calls, "before") },
		Progress:    func() { calls = append(calls, fmt.Sprint("progress ", f.LastIndex())) },
		Events: func(events []lease.Event) {
			calls = append(calls, fmt.Sprintf("events %d at revision %d", len(events), f.Revision()))
		},
	})
	if got := f.Revision(); got != 1 {
		t.Fatalf("revision of an empty state %d, want 1", got)
	}
	results := f.ApplyBatch([]*raft.Log{
		{Index: 1, Type: raft.LogConfiguration},
		entry(t, 2, lease.Command{Op: lease.OpAcquire, Key: "a", ID: leaseID(1), Owner: "o", TTL: time.Second}),
		entry(t, 3, lease.Command{Op: lease.OpAcquire, Key: "a", ID: leaseID(2), Owner: "p", TTL: time.Second}),
		{Index: 4, Type: raft.LogCommand, Data: []byte{0xEE}},
		entry(t, 5, lease.Command{Op: lease.OpRelease, Key: "a", ID: leaseID(1), NextID: leaseID(3), Owner: "q", TTL: time.Second}),
	})
	if results[0] != nil {
		t.Errorf("configuration entry answered %v", results[0])
	}
	if r := results[1].(lease.Result); r.Err != nil || r.Event.Type != lease.Acquired || r.Event.Lease.Token != 2 {
		t.Errorf("acquisition: %+v", r)
	}
	if r := results[2].(lease.Result); !errors.Is(r.Err, lease.ErrHeld) {
		t.Errorf("acquisition of a held key: %+v", r)
	}
	if r := results[3].(lease.Result); r.Err == nil {
		t.Error("an undecodable command applied")
	}
	if r := results[4].(lease.Result); r.Err != nil || r.Event.Type != lease.Released || r.Next.Type != lease.Acquired || r.Next.Lease.Owner != "q" {
		t.Errorf("release with handover: %+v", r)
	}
	want := []string{"before", "progress 5", "events 3 at revision 5"}
	if !slices.Equal(calls, want) {
		t.Errorf("hooks %q, want %q", calls, want)
	}
	if h := f.Held("a", leaseID(3)); h == nil || h.ID != leaseID(3) || f.Held("a", leaseID(1)) != nil {
		t.Error("Held does not see the handover")
	}
	f.Read(func(st *lease.State) {
		if got := ReadRevision(st); got != 5 {
			t.Errorf("ReadRevision %d, want 5", got)
		}
	})
}

// A snapshot holds the leases, the tokens of freed keys, the applied index
// and the members' client URLs; restored, it is the same state, whose
// snapshot is the same bytes, and the state machine tells Restored of it.
// Two state machines that apply the same log hold the same bytes.
func TestSnapshotRestoreRoundTrip(t *testing.T) {
	var logs []*raft.Log
	for i := range 20 {
		logs = append(logs, entry(t, uint64(2*i+1), lease.Command{Op: lease.OpAcquire, Key: fmt.Sprintf("k/%02d", i), ID: leaseID(i), Owner: fmt.Sprint("o", i%3), TTL: time.Duration(i+1) * time.Second}))
		if i%4 == 0 {
			logs = append(logs, entry(t, uint64(2*i+2), lease.Command{Op: lease.OpRelease, Key: fmt.Sprintf("k/%02d", i), ID: leaseID(i)}))
		} else {
			logs = append(logs, &raft.Log{Index: uint64(2*i + 2), Type: raft.LogCommand, Data: EncodeMemberEntry(fmt.Sprint("n", i%5), fmt.Sprintf("http://h%d:7420", i))})
		}
	}
	f, g := New(100, Hooks{}), New(100, Hooks{})
	f.ApplyBatch(logs)
	for _, l := range logs { // one at a time: the same state
		g.Apply(l)
	}
	data := snapshotBytes(t, f)
	if !bytes.Equal(data, snapshotBytes(t, g)) {
		t.Fatal("two state machines that applied the same log snapshot different bytes")
	}

	var restoredApplied uint64
	h := New(100, Hooks{Restored: func(st *lease.State) { restoredApplied = st.Applied() }})
	h.ApplyBatch([]*raft.Log{entry(t, 1, lease.Command{Op: lease.OpAcquire, Key: "gone", ID: leaseID(99), Owner: "x", TTL: time.Second})})
	if err := h.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
		t.Fatal(err)
	}
	// Entry 40 sets a client URL: the revision is that of the last command.
	if restoredApplied != 39 {
		t.Errorf("Restored saw applied index %d, want 39", restoredApplied)
	}
	if got := h.Revision(); got != 39 {
		t.Errorf("revision after restore %d, want 39", got)
	}
	if want, got := f.View().List("", 0), h.View().List("", 0); !slices.Equal(got, want) || len(got) != 15 {
		t.Errorf("restored leases\n%+v\nwant the 15 of\n%+v", got, want)
	}
	if !maps.Equal(h.ClientURLs(), f.ClientURLs()) || len(h.ClientURLs()) != 5 {
		t.Errorf("restored client URLs %v, want %v", h.ClientURLs(), f.ClientURLs())
	}
	f.Read(func(fs *lease.State) {
		h.Read(func(hs *lease.State) {
			if a, b := fs.LastToken("k/00"), hs.LastToken("k/00"); a != 1 || b != a {
				t.Errorf("last token of a freed key %d, restored %d, want 1", a, b)
			}
		})
	})
	if !bytes.Equal(snapshotBytes(t, h), data) {
		t.Error("the restored state snapshots other bytes")
	}
	if taken, restored := h.SnapshotStats(); taken != 1 || restored != 1 {
		t.Errorf("snapshot stats %d taken, %d restored; want 1 and 1", taken, restored)
	}
	// The next grant continues from the restored log.
	r := h.Apply(entry(t, 41, lease.Command{Op: lease.OpAcquire, Key: "k/00", ID: leaseID(100), Owner: "o", TTL: time.Second})).(lease.Result)
	if r.Err != nil || r.Event.Lease.Token != 41 {
		t.Errorf("grant after restore: %+v", r)
	}
}

// A damaged snapshot is refused and leaves the state as it was.
func TestRestoreRefusesDamage(t *testing.T) {
	f := New(0, Hooks{})
	f.ApplyBatch([]*raft.Log{
		{Index: 1, Type: raft.LogCommand, Data: EncodeMemberEntry("n1", "http://a:1")},
		entry(t, 2, lease.Command{Op: lease.OpAcquire, Key: "k", ID: leaseID(1), Owner: "o", TTL: time.Second}),
	})
	data := snapshotBytes(t, f)
	g := New(0, Hooks{Restored: func(*lease.State) { t.Error("Restored called for a refused snapshot") }})
	for _, n := range []int{len(membersMagic) + 3, len(data) - 1} {
		if err := g.Restore(io.NopCloser(bytes.NewReader(data[:n]))); err == nil {
			t.Errorf("a snapshot cut at %d of %d bytes restored", n, len(data))
		}
	}
	if g.View().Len() != 0 || len(g.ClientURLs()) != 0 {
		t.Error("a refused snapshot changed the state")
	}
}

// The members' client URLs are set and forgotten by log entries, survive a
// snapshot with the leases, and a snapshot without them (an older fenced's,
// or a restored backup's) restores with none.
func TestClientURLsInLogAndSnapshot(t *testing.T) {
	f := New(10, Hooks{})
	acquire, err := lease.Command{Op: lease.OpAcquire, Key: "k", ID: "0123456789abcdef0123456789abcdef", Owner: "o", TTL: time.Second}.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	logs := []*raft.Log{
		{Index: 1, Type: raft.LogCommand, Data: EncodeMemberEntry("n1", "http://127.0.0.1:7420")},
		{Index: 2, Type: raft.LogCommand, Data: EncodeMemberEntry("n2", "https://b.example:7420")},
		{Index: 3, Type: raft.LogCommand, Data: acquire},
		{Index: 4, Type: raft.LogCommand, Data: EncodeMemberEntry("n3", "http://c:7420")},
		{Index: 5, Type: raft.LogCommand, Data: EncodeMemberEntry("n3", "")},
	}
	for i, res := range f.ApplyBatch(logs) {
		if err, ok := res.(error); ok && err != nil {
			t.Fatalf("entry %d: %v", i+1, err)
		}
	}
	want := map[string]string{"n1": "http://127.0.0.1:7420", "n2": "https://b.example:7420"}
	if got := f.ClientURLs(); !maps.Equal(got, want) {
		t.Fatalf("client URLs %v, want %v", got, want)
	}
	if r, ok := f.ApplyBatch([]*raft.Log{{Index: 6, Type: raft.LogCommand, Data: []byte{memberEntryTag, 9}}})[0].(error); !ok || r == nil {
		t.Errorf("a truncated member entry applied: %v", r)
	}

	data := snapshotBytes(t, f)
	if !bytes.Equal(data, snapshotBytes(t, f)) {
		t.Error("two snapshots of one state differ")
	}
	g := New(10, Hooks{})
	if err := g.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
		t.Fatal(err)
	}
	if got := g.ClientURLs(); !maps.Equal(got, want) {
		t.Errorf("restored client URLs %v, want %v", got, want)
	}
	if ls := g.View().List("", 0); len(ls) != 1 || ls[0].Key != "k" || ls[0].Owner != "o" {
		t.Errorf("restored leases %+v", ls)
	}

	var leaseOnly bytes.Buffer
	if _, err := f.state.Snapshot().WriteTo(&leaseOnly); err != nil {
		t.Fatal(err)
	}
	h := New(10, Hooks{})
	if err := h.Restore(io.NopCloser(&leaseOnly)); err != nil {
		t.Fatalf("a snapshot without client URLs: %v", err)
	}
	if got := h.ClientURLs(); len(got) != 0 {
		t.Errorf("client URLs from a snapshot without them: %v", got)
	}
	if ls := h.View().List("", 0); len(ls) != 1 {
		t.Errorf("the lease of a snapshot without client URLs: %+v", ls)
	}
}
