package check

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencedio/fenced/internal/torture/history"
	"github.com/fencedio/fenced/store"
)

func TestCheckStoreOrder(t *testing.T) {
	rec := func(seq uint64, scope string, token, before uint64) store.AuditRecord {
		return store.AuditRecord{Seq: seq, Scope: scope, Token: token, HighestBefore: before, Object: fmt.Sprintf("o%d", seq)}
	}
	tests := []struct {
		name  string
		audit []store.AuditRecord
		want  int
	}{
		{"increasing and equal tokens", []store.AuditRecord{rec(1, "a", 3, 0), rec(2, "a", 3, 3), rec(3, "a", 7, 3)}, 0},
		{"scopes are independent", []store.AuditRecord{rec(1, "a", 9, 0), rec(2, "b", 3, 0)}, 0},
		{"stale overwrite", []store.AuditRecord{rec(1, "a", 9, 0), rec(2, "a", 3, 9), rec(3, "a", 4, 9)}, 2},
		{"order is by seq, not by slice order", []store.AuditRecord{rec(2, "a", 9, 3), rec(1, "a", 3, 0)}, 0},
		{"highestBefore disagrees with the log", []store.AuditRecord{rec(1, "a", 9, 0), rec(2, "a", 10, 2)}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := StoreOrder(tt.audit)
			if r.Violations != tt.want || r.Checked != len(tt.audit) {
				t.Errorf("violations %d checked %d, want %d and %d: %v", r.Violations, r.Checked, tt.want, len(tt.audit), r.Examples)
			}
		})
	}
}

func TestCheckSQLOrder(t *testing.T) {
	rows := []SQLRow{{ID: 1, Scope: "a", Token: 5}, {ID: 2, Scope: "b", Token: 1}, {ID: 3, Scope: "a", Token: 4}, {ID: 4, Scope: "a", Token: 6}}
	if r := SQLOrder(rows); r.Violations != 1 || !strings.Contains(r.Examples[0], "row 3") {
		t.Errorf("got %d violations %v, want 1 naming row 3", r.Violations, r.Examples)
	}
	if r := SQLOrder(rows[:2]); r.Violations != 0 {
		t.Errorf("got %d violations %v, want 0", r.Violations, r.Examples)
	}
}

func TestCheckTokens(t *testing.T) {
	tests := []struct {
		name string
		h    *hb
		want int
	}{
		{"increasing", new(hb).add(0, 0, 1, acquired("a", 3)).add(1, 2, 3, acquired("b", 5)), 0},
		{"concurrent grants may come in either order", new(hb).add(0, 0, 10, acquired("a", 5)).add(1, 1, 9, acquired("b", 3)), 0},
		{"later grant with a lower token", new(hb).add(0, 0, 1, acquired("a", 5)).add(1, 2, 3, acquired("b", 3)), 1},
		{"token granted twice on one key", new(hb).add(0, 0, 1, acquired("a", 5)).add(1, 0, 1, acquired("b", 5)), 1},
		{"token granted twice across keys", new(hb).
			add(0, 0, 1, history.Op{Kind: history.KindAcquire, Key: "x", Owner: "a", Token: 5, Outcome: history.OK}).
			add(1, 0, 1, history.Op{Kind: history.KindAcquire, Key: "y", Owner: "b", Token: 5, Outcome: history.OK}), 1},
		{"lower than an earlier grant that is not the latest", new(hb).
			add(0, 0, 1, acquired("a", 8)).add(1, 0, 2, acquired("b", 4)).add(2, 3, 4, acquired("c", 6)), 1},
		{"refused and unknown acquisitions are not grants", new(hb).
			add(0, 0, 1, acquired("a", 5)).add(1, 2, 3, heldBy("b", "a", 5)).add(2, 4, 0, acquireUnknown("c")), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if r := Tokens(history.NewHistory(tt.h.ops)); r.Violations != tt.want {
				t.Errorf("violations %d, want %d: %v", r.Violations, tt.want, r.Examples)
			}
		})
	}
}

func TestCheckProvenance(t *testing.T) {
	put := func(token uint64, object string) history.Op {
		return history.Op{Kind: history.KindPut, Token: token, Object: object, Outcome: history.OK}
	}
	h := history.NewHistory(new(hb).
		add(0, 0, 1, acquired("w0-1", 5)).
		add(0, 2, 3, put(5, "k/w0/1")).
		add(1, 2, 3, put(5, "k/w1/1")). // worker 1 presents worker 0's token
		add(0, 4, 5, history.Op{Kind: history.KindSQL, Token: 5, Object: "k/w0/2", Outcome: history.OK}).ops)
	ev := &Evidence{
		Audit: []store.AuditRecord{
			{Seq: 1, Scope: "k", Token: 5, Object: "k/w0/1"},
			{Seq: 2, Scope: "k", Token: 5, Object: "k/w1/1"},
			{Seq: 3, Scope: "k", Token: 5, Object: "k/nobody/1"},
			{Seq: 4, Scope: "k", Token: 6, Object: "k/w0/1"}, // not what worker 0 sent
		},
		SQLRows: []SQLRow{{ID: 1, Scope: "k", Token: 5, Worker: 0, Object: "k/w0/2"}, {ID: 2, Scope: "k", Token: 5, Worker: 1, Object: "k/w0/2"}},
		HasSQL:  true,
	}
	r := Provenance(h, ev)
	if r.Checked != 6 || r.Violations != 4 {
		t.Fatalf("checked %d violations %d, want 6 and 4: %v", r.Checked, r.Violations, r.Examples)
	}
	for i, want := range []string{"never granted to worker 1", "written by no worker", "worker 0 sent scope", "worker 0 sent scope"} {
		if !strings.Contains(r.Examples[i], want) {
			t.Errorf("example %d = %q, want it to mention %q", i, r.Examples[i], want)
		}
	}
}

func TestCheckAckedPresent(t *testing.T) {
	ops := new(hb).
		add(0, 0, 1, history.Op{Kind: history.KindPut, Key: "k", Token: 5, Object: "k/w0/1", Outcome: history.OK}).
		add(0, 2, 3, history.Op{Kind: history.KindPut, Key: "k", Token: 5, Object: "k/w0/2", Outcome: history.OK}).
		add(0, 4, 5, history.Op{Kind: history.KindPut, Key: "k", Token: 5, Object: "k/w0/3", Outcome: history.Unknown}).
		add(0, 6, 7, history.Op{Kind: history.KindSQL, Key: "k", Token: 5, Object: "k/w0/4", Outcome: history.OK}).ops
	h := history.NewHistory(ops)
	ev := &Evidence{
		Objects: map[string]FinalObject{
			"k/w0/1": {Present: true, Token: 5, Value: history.ObjectValue(ops[0])},
			"k/w0/2": {Present: true, Token: 5, Value: []byte("something else")},
			"k/w1/9": {Present: false},
		},
		Delayed: []history.DelayedWrite{{Object: "k/w1/9", Token: 4, Status: 204}, {Object: "k/w1/8", Token: 3, Status: 409}},
		HasSQL:  true,
	}
	r := AckedPresent(h, ev)
	// k/w0/2 has the wrong value, k/w1/9 (acked to the proxy) and the SQL
	// row are missing; the unknown write and the rejected delayed write are
	// not required.
	if r.Checked != 4 || r.Violations != 3 {
		t.Errorf("checked %d violations %d, want 4 and 3: %v", r.Checked, r.Violations, r.Examples)
	}
}

func TestCheckExclusion(t *testing.T) {
	tests := []struct {
		name string
		h    *hb
		want int
	}{
		{"next grant after the TTL", new(hb).add(0, 0, 1, acquired("a", 5)).add(1, 500, 1001, acquired("b", 9)), 0},
		{"next grant before the TTL", new(hb).add(0, 0, 1, acquired("a", 5)).add(1, 500, 900, acquired("b", 9)), 1},
		{"renewal extends from its send time", new(hb).add(0, 0, 1, acquired("a", 5)).add(0, 300, 301, renewed("a", 5)).
			add(1, 500, 1200, acquired("b", 9)), 1},
		{"refused renewal does not extend", new(hb).add(0, 0, 1, acquired("a", 5)).add(0, 300, 301, renewRefused("a")).
			add(1, 500, 1001, acquired("b", 9)), 0},
		{"release ends the lease when sent", new(hb).add(0, 0, 1, acquired("a", 5)).add(0, 100, 0, released("a")).
			add(1, 50, 150, acquired("b", 9)), 0},
		{"ordered by token, not by time", new(hb).add(1, 0, 2000, acquired("b", 9)).add(0, 0, 1, acquired("a", 5)), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if r := Exclusion(history.NewHistory(tt.h.ops)); r.Violations != tt.want {
				t.Errorf("violations %d, want %d: %v", r.Violations, tt.want, r.Examples)
			}
		})
	}
}

func TestCheckRenewals(t *testing.T) {
	tests := []struct {
		name string
		h    *hb
		want int
	}{
		{"refused after the deadline", new(hb).add(0, 0, 1, acquired("a", 5)).add(0, 300, 301, renewed("a", 5)).
			add(0, 1400, 1401, renewRefused("a")), 0},
		{"refused before the grant's deadline", new(hb).add(0, 0, 1, acquired("a", 5)).add(0, 600, 601, renewRefused("a")), 1},
		{"refused before an acknowledged renewal's deadline", new(hb).add(0, 0, 1, acquired("a", 5)).
			add(0, 300, 301, renewed("a", 5)).add(0, 1200, 1201, renewRefused("a")), 1},
		{"a renewal still in flight does not count", new(hb).add(0, 0, 1, acquired("a", 5)).
			add(0, 900, 1300, renewed("a", 5)).add(0, 1200, 1201, renewRefused("a")), 0},
		{"released before", new(hb).add(0, 0, 1, acquired("a", 5)).add(0, 100, 0, released("a")).
			add(0, 200, 201, renewRefused("a")), 0},
		{"another lease's refusal", new(hb).add(0, 0, 1, acquired("a", 5)).add(1, 200, 201, renewRefused("b")), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if r := Renewals(history.NewHistory(tt.h.ops)); r.Violations != tt.want {
				t.Errorf("violations %d, want %d: %v", r.Violations, tt.want, r.Examples)
			}
		})
	}
}

func TestCheckSequences(t *testing.T) {
	rec := func(seq uint64, scope string, token, sequence uint64) store.AuditRecord {
		return store.AuditRecord{Seq: seq, Scope: scope, Token: token, Sequence: sequence, Object: fmt.Sprintf("o%d", seq)}
	}
	row := func(id int64, scope string, token, sequence uint64) SQLRow {
		return SQLRow{ID: id, Scope: scope, Token: token, Sequence: sequence, Object: "s"}
	}
	for _, tc := range []struct {
		name  string
		audit []store.AuditRecord
		rows  []SQLRow
		want  int
	}{
		{"distinct", []store.AuditRecord{rec(1, "a", 3, 1), rec(2, "a", 3, 2), rec(3, "a", 4, 1), rec(4, "b", 3, 1)},
			[]SQLRow{row(1, "a", 3, 1), row(2, "a", 3, 2), row(3, "b", 3, 1)}, 0},
		{"unsequenced repeats are not checked", []store.AuditRecord{rec(1, "a", 3, 0), rec(2, "a", 3, 0)},
			[]SQLRow{row(1, "a", 3, 0), row(2, "a", 3, 0)}, 0},
		{"applied twice", []store.AuditRecord{rec(1, "a", 3, 1), rec(2, "a", 3, 2), rec(3, "a", 3, 2), rec(4, "a", 3, 1)}, nil, 2},
		{"committed twice", nil, []SQLRow{row(1, "a", 3, 1), row(2, "a", 3, 2), row(3, "a", 3, 1)}, 1},
	} {
		h := history.NewHistory(nil)
		if got := Sequences(h, &Evidence{Audit: tc.audit, SQLRows: tc.rows, HasSQL: true}); got.Violations != tc.want {
			t.Errorf("%s: %d violations, want %d: %v", tc.name, got.Violations, tc.want, got.Examples)
		}
	}
}

// TestCheckSequencesCountsResends: the note counts resends by answer, and
// a copy applied twice is timed at its first resend.
func TestCheckSequencesCountsResends(t *testing.T) {
	ms := int64(time.Millisecond)
	put := func(seq, resendOf, call int64, outcome history.Outcome, code string) *history.Op {
		return &history.Op{Worker: 1, Seq: seq, Kind: history.KindPut, Key: "a", Token: 3, Sequence: 1, Object: "o1",
			ResendOf: resendOf, Call: call * ms, Return: call*ms + ms, Outcome: outcome, Code: code}
	}
	h := history.NewHistory([]*history.Op{
		put(1, 0, 10, history.Unknown, history.CodeAnswerLost),
		put(2, 1, 20, history.Unknown, history.CodeTimeout),
		put(3, 1, 30, history.OK, history.CodeDuplicate),
	})
	audit := []store.AuditRecord{
		{Seq: 1, Scope: "a", Token: 3, Sequence: 1, Object: "o1"},
		{Seq: 2, Scope: "a", Token: 3, Sequence: 1, Object: "o1"},
	}
	r := Sequences(h, &Evidence{Audit: audit})
	if r.Violations != 1 || r.First != 20*ms {
		t.Errorf("violations %d first %d, want 1 at the first resend (%d): %v", r.Violations, r.First, 20*ms, r.Examples)
	}
	if want := "resends: store 2 (1 refused as duplicates, 0 applied, 0 stale, 1 unknown)"; !strings.HasPrefix(r.Note, want) {
		t.Errorf("note %q, want it to start with %q", r.Note, want)
	}
}

func TestCheckRedisOrder(t *testing.T) {
	rec := func(i int, scope string, token uint64) RedisRecord {
		return RedisRecord{Index: i, Scope: scope, Token: token, Object: fmt.Sprintf("o%d", i)}
	}
	for _, tc := range []struct {
		name string
		recs []RedisRecord
		want int
	}{
		{"rising and equal tokens", []RedisRecord{rec(0, "a", 3), rec(1, "a", 3), rec(2, "a", 5), rec(0, "b", 1)}, 0},
		{"a stale token after a higher one", []RedisRecord{rec(0, "a", 3), rec(1, "a", 5), rec(2, "a", 4), rec(0, "b", 4)}, 1},
	} {
		if got := RedisOrder(tc.recs); got.Violations != tc.want {
			t.Errorf("%s: %d violations, want %d: %v", tc.name, got.Violations, tc.want, got.Examples)
		}
	}
}
