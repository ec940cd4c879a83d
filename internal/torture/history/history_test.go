package history

import (
	"os"
	"path/filepath"
	"testing"
)

func TestReadHistoryMergesAndToleratesTornLastLine(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "w.jsonl")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	rec := NewRecorder(f, 3, 0)
	a := &Op{Kind: KindAcquire, Key: "k", Owner: "w3-1"}
	rec.Begin(a)
	b := &Op{Kind: KindGet, Key: "k"}
	rec.Begin(b)
	a.Token = 7
	rec.End(a, OK, "", nil)
	f.WriteString(`{"w":3,"n":3,"kind":"ren`) // killed mid-write
	f.Close()
	if err := rec.Err(); err != nil {
		t.Fatal(err)
	}
	h, err := ReadHistory(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Ops) != 2 {
		t.Fatalf("got %d operations, want 2", len(h.Ops))
	}
	if got := h.Ops[0]; got.Seq != 1 || got.Outcome != OK || got.Token != 7 || !got.Finished() {
		t.Errorf("first op = %+v, want the acquisition's result", got)
	}
	if got := h.Ops[1]; got.Finished() {
		t.Errorf("second op = %+v, want it unfinished", got)
	}
	if h.End < h.Ops[0].Return {
		t.Errorf("End %d is before the last return %d", h.End, h.Ops[0].Return)
	}
}
