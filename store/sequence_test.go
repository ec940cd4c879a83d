package store_test

import (
	"net/http"
	"strconv"
	"testing"

	"github.com/fencedio/fenced/fence/fencehttp"
	"github.com/fencedio/fenced/store"
)

// Fencing-Sequence over the store's HTTP API: in order, duplicate (409
// duplicate-write, not applied, not audited, not a stale rejection), no
// sequence, a new epoch; the audit records each write's sequence.
func TestSequences(t *testing.T) {
	e := newEnv(t, store.Config{})
	put := func(token, seq uint64, value string) reply {
		h := fencing("jobs/1", tok(token))
		if seq != 0 {
			h.Set(fencehttp.HeaderSequence, strconv.FormatUint(seq, 10))
		}
		return e.do(http.MethodPut, "/v1/objects/o", h, []byte(value))
	}
	mustStatus(t, "seq 1", put(5, 1, "a"), 204)
	mustStatus(t, "seq 2", put(5, 2, "b"), 204)
	dup := put(5, 2, "c")
	mustStatus(t, "seq 2 again", dup, 409)
	if p := dup.problem(t); p["type"] != fencehttp.ProblemDuplicate || p["lastSequence"] != float64(2) {
		t.Fatalf("duplicate problem %v", p)
	}
	mustStatus(t, "no sequence", put(5, 0, "d"), 204)
	mustStatus(t, "new epoch", put(6, 1, "e"), 204)
	mustStatus(t, "bad sequence", put(6, 0, "f"), 204)
	h := fencing("jobs/1", tok(6))
	h.Set(fencehttp.HeaderSequence, "x")
	mustStatus(t, "malformed sequence", e.do(http.MethodPut, "/v1/objects/o", h, []byte("g")), 400)

	e.wantObject("o", "jobs/1", 6, "f")
	var got []uint64
	for _, r := range e.audit() {
		got = append(got, r.Sequence)
	}
	want := []uint64{1, 2, 0, 1, 0}
	if len(got) != len(want) {
		t.Fatalf("audit sequences %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("audit sequences %v, want %v", got, want)
		}
	}
	if n := e.s.RejectionCount(); n != 0 {
		t.Fatalf("%d stale rejections counted for a duplicate", n)
	}
}
