package store_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencehttp"
	"github.com/fencedio/fenced/internal/faultproxy"
	"github.com/fencedio/fenced/internal/seqstress"
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

// With StrictSequences a sequence that skips ahead under the current token
// is refused (409 sequence-gap), with nothing applied or audited; without
// it the same write is applied. A new token, or no sequence, is decided
// as without it.
func TestStrictSequences(t *testing.T) {
	for _, strict := range []bool{false, true} {
		t.Run(fmt.Sprintf("strict=%t", strict), func(t *testing.T) {
			e := newEnv(t, store.Config{StrictSequences: strict})
			put := func(token, seq uint64, value string) reply {
				h := fencing("jobs/1", tok(token))
				if seq != 0 {
					h.Set(fencehttp.HeaderSequence, strconv.FormatUint(seq, 10))
				}
				return e.do(http.MethodPut, "/v1/objects/o", h, []byte(value))
			}
			mustStatus(t, "seq 1", put(5, 1, "a"), 204)
			gap := put(5, 3, "c")
			if !strict {
				mustStatus(t, "seq 3 after 1", gap, 204)
				return
			}
			mustStatus(t, "seq 3 after 1", gap, 409)
			if p := gap.problem(t); p["type"] != fencehttp.ProblemSequenceGap || p["lastSequence"] != float64(1) {
				t.Fatalf("gap problem %v", p)
			}
			e.wantObject("o", "jobs/1", 5, "a")
			if n := len(e.audit()); n != 1 {
				t.Fatalf("audit has %d records after a gap, want 1", n)
			}
			ctx := fence.WithSequence(context.Background(), 4)
			if _, err := e.s.Put(ctx, "jobs/1", 5, "o", []byte("d")); !errors.Is(err, fence.ErrSequenceGap) {
				t.Fatalf("Put with sequence 4 after 1 = %v, want ErrSequenceGap", err)
			}
			mustStatus(t, "seq 2", put(5, 2, "b"), 204)
			mustStatus(t, "no sequence", put(5, 0, "n"), 204)
			mustStatus(t, "new epoch, seq 9", put(6, 9, "e"), 204)
			mustStatus(t, "seq 11 after 9", put(6, 11, "f"), 409)
			e.wantObject("o", "jobs/1", 6, "e")
			if n := e.s.RejectionCount(); n != 0 {
				t.Fatalf("%d stale rejections counted for gaps", n)
			}
		})
	}
}

// The guard stress with sequences against the store over HTTP, through a
// proxy that resets every connection every 20 ms: writers send each write
// again with its sequence when its answer was lost (or cut by their own
// deadline); the audit shows each (token, sequence) at most once and every
// acknowledged write exactly once.
func TestSequenceStress(t *testing.T) {
	duration := 3 * time.Second
	if os.Getenv("FENCED_LONG") == "1" {
		duration = 30 * time.Second
	}
	e := newEnv(t, store.Config{})
	p, err := faultproxy.Listen("127.0.0.1:0", e.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	hc := &http.Client{}
	write := func(ctx context.Context, token uint64) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPut, "http://"+p.Addr()+"/v1/objects/o", strings.NewReader("v"))
		if err != nil {
			return err
		}
		req.Header.Set(fencehttp.HeaderScope, "s")
		req.Header.Set(fencehttp.HeaderToken, strconv.FormatUint(token, 10))
		req.Header.Set(fencehttp.HeaderSequence, strconv.FormatUint(fence.SequenceFromContext(ctx), 10))
		resp, err := hc.Do(req)
		if err != nil {
			return fmt.Errorf("%w: %w", fence.ErrUnknownOutcome, err)
		}
		defer resp.Body.Close()
		if err := fencehttp.ErrorFromResponse(resp); err != nil {
			return err
		}
		if resp.StatusCode != http.StatusNoContent {
			return fmt.Errorf("%w: HTTP %d", fence.ErrUnknownOutcome, resp.StatusCode)
		}
		return nil
	}
	applied := func() map[seqstress.Key]int {
		m := map[seqstress.Key]int{}
		for _, r := range e.audit() {
			m[seqstress.Key{Token: r.Token, Seq: r.Sequence}]++
		}
		return m
	}
	reset := func(ctx context.Context) int {
		n := 0
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return n
			case <-tick.C:
				p.Reset()
				n++
			}
		}
	}
	res := seqstress.Run(t, seqstress.Config{Writers: 4, Duration: duration, CutShare: 0.2, Cut: time.Millisecond,
		Timeout: 5 * time.Second, Attempts: 20, Reacquire: 20 * time.Millisecond, Fault: reset}, write, applied)
	t.Log(res)
	if res.Faults == 0 || res.Cut == 0 {
		t.Errorf("the stress exercised nothing: %v", res)
	}
}
