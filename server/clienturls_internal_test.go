package server

import (
	"bytes"
	"io"
	"maps"
	"testing"
	"time"

	"github.com/fencedio/fenced/lease"
	"github.com/hashicorp/raft"
)

type bufSink struct{ bytes.Buffer }

func (*bufSink) ID() string    { return "test" }
func (*bufSink) Cancel() error { return nil }
func (*bufSink) Close() error  { return nil }

func snapshotBytes(t *testing.T, f *fsm) []byte {
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

// The members' client URLs are set and forgotten by log entries, survive a
// snapshot with the leases, and a snapshot without them (an older fenced's,
// or a restored backup's) restores with none.
func TestClientURLsInLogAndSnapshot(t *testing.T) {
	f := newFSM(10)
	acquire, err := lease.Command{Op: lease.OpAcquire, Key: "k", ID: "0123456789abcdef0123456789abcdef", Owner: "o", TTL: time.Second}.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	logs := []*raft.Log{
		{Index: 1, Type: raft.LogCommand, Data: encodeMemberEntry("n1", "http://127.0.0.1:7420")},
		{Index: 2, Type: raft.LogCommand, Data: encodeMemberEntry("n2", "https://b.example:7420")},
		{Index: 3, Type: raft.LogCommand, Data: acquire},
		{Index: 4, Type: raft.LogCommand, Data: encodeMemberEntry("n3", "http://c:7420")},
		{Index: 5, Type: raft.LogCommand, Data: encodeMemberEntry("n3", "")},
	}
	for i, res := range f.ApplyBatch(logs) {
		if err, ok := res.(error); ok && err != nil {
			t.Fatalf("entry %d: %v", i+1, err)
		}
	}
	want := map[string]string{"n1": "http://127.0.0.1:7420", "n2": "https://b.example:7420"}
	if got := f.clientURLs(); !maps.Equal(got, want) {
		t.Fatalf("client URLs %v, want %v", got, want)
	}
	if r, ok := f.ApplyBatch([]*raft.Log{{Index: 6, Type: raft.LogCommand, Data: []byte{memberEntryTag, 9}}})[0].(error); !ok || r == nil {
		t.Errorf("a truncated member entry applied: %v", r)
	}

	data := snapshotBytes(t, f)
	if !bytes.Equal(data, snapshotBytes(t, f)) {
		t.Error("two snapshots of one state differ")
	}
	g := newFSM(10)
	if err := g.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
		t.Fatal(err)
	}
	if got := g.clientURLs(); !maps.Equal(got, want) {
		t.Errorf("restored client URLs %v, want %v", got, want)
	}
	if ls := g.view().List("", 0); len(ls) != 1 || ls[0].Key != "k" || ls[0].Owner != "o" {
		t.Errorf("restored leases %+v", ls)
	}

	var leaseOnly bytes.Buffer
	if _, err := f.state.Snapshot().WriteTo(&leaseOnly); err != nil {
		t.Fatal(err)
	}
	h := newFSM(10)
	if err := h.Restore(io.NopCloser(&leaseOnly)); err != nil {
		t.Fatalf("a snapshot without client URLs: %v", err)
	}
	if got := h.clientURLs(); len(got) != 0 {
		t.Errorf("client URLs from a snapshot without them: %v", got)
	}
	if ls := h.view().List("", 0); len(ls) != 1 {
		t.Errorf("the lease of a snapshot without client URLs: %+v", ls)
	}
}

func TestValidateClientURL(t *testing.T) {
	for _, ok := range []string{"http://127.0.0.1:7420", "https://fenced-1.example.com:7420", "http://[::1]:7420", "http://h/"} {
		if err := ValidateClientURL(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "127.0.0.1:7420", "ftp://h:1", "http://", "http://h:1/path", "http://h:1?q", "http://u@h:1", "http://0.0.0.0:7420", "http://[::]:7420"} {
		if err := ValidateClientURL(bad); err == nil {
			t.Errorf("%q was accepted", bad)
		}
	}
}
