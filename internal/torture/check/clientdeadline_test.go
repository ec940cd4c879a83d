package check

import (
	"testing"
	"time"

	"github.com/fencedio/fenced/internal/torture/history"
)

func TestCheckClientDeadline(t *testing.T) {
	ms := int64(time.Millisecond)
	grant := &history.Op{Worker: 1, Seq: 1, Kind: history.KindAcquire, Key: "k", LeaseID: "L", Token: 7, TTLMs: 1000,
		Call: 1000 * ms, Return: 1200 * ms, Outcome: history.OK}
	renew := &history.Op{Worker: 1, Seq: 2, Kind: history.KindRenew, Key: "k", LeaseID: "L", Token: 7, TTLMs: 1000,
		Call: 1500 * ms, Return: 1900 * ms, Outcome: history.OK}
	write := func(seq int64, call, deadline int64) *history.Op {
		return &history.Op{Worker: 1, Seq: seq, Kind: history.KindSQL, Key: "k", Token: 7, Call: call * ms, Return: call*ms + ms,
			Outcome: history.OK, Deadline: deadline * ms}
	}
	for _, tc := range []struct {
		name       string
		write      *history.Op
		violations int
	}{
		{"from the grant's send", write(3, 1300, 1989), 0},
		{"from the grant's answer", write(3, 1300, 2189), 1},
		// The renewal was not answered when the write began: it cannot count.
		{"from a renewal still in flight", write(3, 1600, 2489), 1},
		{"from the renewal's send", write(3, 2000, 2489), 0},
		{"no deadline recorded", write(3, 1300, 0), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := ClientDeadline(history.NewHistory([]*history.Op{grant, renew, tc.write}))
			if r.Violations != tc.violations {
				t.Errorf("violations = %d, want %d: %v", r.Violations, tc.violations, r.Examples)
			}
			var first int64 // a violation is timed at the write's call
			if tc.violations > 0 {
				first = tc.write.Call
			}
			if r.First != first {
				t.Errorf("first violation at %d, want %d", r.First, first)
			}
		})
	}
}
