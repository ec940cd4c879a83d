package check

import (
	"strings"
	"testing"

	"github.com/fencedio/fenced/internal/torture/history"
)

// queueRun builds a queue path's evidence: publishes of messages m1..,
// rows and decisions.
type queueRun struct {
	ops []*history.Op
	q   QueueEvidence
}

// publish records message id published under (scope k, token, seq) with
// outcome o; resendOf marks a resent copy.
func (r *queueRun) publish(id string, token, seq uint64, o history.Outcome, resendOf int64) *queueRun {
	n := int64(len(r.ops) + 1)
	r.ops = append(r.ops, &history.Op{Worker: 0, Seq: n, Kind: history.KindPublish, Key: "k", Token: token, Sequence: seq,
		Object: id, Via: history.ViaDirect, Call: n * 10, Return: n*10 + 1, Outcome: o, ResendOf: resendOf})
	return r
}

func (r *queueRun) row(id string, token, seq uint64) *queueRun {
	r.q.Rows = append(r.q.Rows, MessageRow{ID: int64(len(r.q.Rows) + 1), Scope: "k", Token: token, Sequence: seq, MessageID: id})
	return r
}

func (r *queueRun) decide(id string, token, seq uint64, outcome string, highest uint64, redelivered bool) *queueRun {
	d := history.Delivery{MessageID: id, Scope: "k", Token: token, Sequence: seq, Outcome: outcome, Highest: highest, Redelivered: redelivered}
	if outcome == history.DecisionRefused {
		d.Err = "fencemsg: no token"
	}
	r.q.Deliveries = append(r.q.Deliveries, d)
	return r
}

func (r *queueRun) check() (Result, QueueCounts) {
	return QueueMessages(history.NewHistory(r.ops), &r.q)
}

// good is a correct run: m1 (token 5) applied, its resent copy refused
// as a duplicate, m2 (token 7) applied, m3 (token 5, a paused holder's)
// stale behind it, m4 unconfirmed and never seen, m5 still in the queue.
func good() *queueRun {
	r := new(queueRun).
		publish("m1", 5, 1, history.Unknown, 0).publish("m1", 5, 1, history.OK, 1).
		publish("m2", 7, 1, history.OK, 0).publish("m3", 5, 2, history.OK, 0).
		publish("m4", 7, 2, history.Unknown, 0).publish("m5", 7, 3, history.OK, 0).
		row("m1", 5, 1).row("m2", 7, 1).
		decide("m1", 5, 1, history.DecisionApplied, 0, false).
		decide("m1", 5, 1, history.DecisionDuplicate, 0, false).
		decide("m2", 7, 1, history.DecisionApplied, 0, false).
		decide("m3", 5, 2, history.DecisionStale, 7, false)
	r.q.Left = []history.QueuedMessage{{MessageID: "m5", Scope: "k", Token: 7, Sequence: 3}}
	return r
}

func TestQueueMessagesCorrectRun(t *testing.T) {
	r, c := good().check()
	if r.Violations != 0 {
		t.Fatalf("violations in a correct run: %v", r.Examples)
	}
	want := QueueCounts{Published: 5, Confirmed: 4, Resent: 1, Applied: 2, Stale: 1, Duplicate: 1, Left: 1, NeverSeen: 1}
	if c != want {
		t.Errorf("counts %+v, want %+v", c, want)
	}
	if !strings.Contains(r.Note, "stale 1, duplicate 1") {
		t.Errorf("note %q does not count the outcomes", r.Note)
	}
}

func TestQueueMessagesViolations(t *testing.T) {
	tests := []struct {
		name   string
		change func(r *queueRun)
		want   string
		n      int // violations
	}{
		{"stale message applied", func(r *queueRun) { r.row("m3", 5, 2) }, "stale message applied", 1},
		{"applied twice", func(r *queueRun) { r.row("m2", 7, 1) }, "applied twice", 1},
		{"applied but never published", func(r *queueRun) { r.row("x9", 7, 9) }, "published by no worker", 1},
		{"applied with another stamp", func(r *queueRun) { r.q.Rows[1].Sequence, r.q.Deliveries[2].Sequence = 4, 4 }, "but w0 published it as", 1},
		{"stale against a token nobody applied", func(r *queueRun) { r.q.Deliveries[3].Highest = 6 }, "which no applied message", 1},
		{"duplicate of a message never applied", func(r *queueRun) {
			r.publish("m6", 7, 4, history.OK, 0).decide("m6", 7, 4, history.DecisionDuplicate, 0, false)
		}, "refused as a duplicate, but never applied", 1},
		{"decided applied, nothing committed", func(r *queueRun) {
			r.publish("m6", 7, 4, history.OK, 0).decide("m6", 7, 4, history.DecisionApplied, 0, false)
		}, "nothing of it committed", 2}, // and lost
		{"confirmed and lost", func(r *queueRun) { r.q.Left = nil }, "lost message m5", 1},
		{"only requeued, then lost", func(r *queueRun) {
			r.q.Left = nil
			r.decide("m5", 7, 3, history.DecisionRedeliver, 0, false)
		}, "lost message m5", 1},
		{"refused without a reason", func(r *queueRun) {
			r.publish("m6", 7, 4, history.OK, 0).decide("m6", 7, 4, history.DecisionRefused, 0, false)
			r.q.Deliveries[len(r.q.Deliveries)-1].Err = ""
		}, "refused without a reason", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := good()
			tt.change(r)
			res, _ := r.check()
			n := tt.n
			if res.Violations != n || !strings.Contains(res.Examples[0], tt.want) {
				t.Errorf("got %d violations %q, want %d, the first saying %q", res.Violations, res.Examples, n, tt.want)
			}
		})
	}
}

// TestQueueMessagesRedeliveries: a redelivery is counted after a kill
// unless the same consumer requeued the message itself.
func TestQueueMessagesRedeliveries(t *testing.T) {
	r := good()
	r.publish("m6", 7, 4, history.OK, 0).publish("m7", 7, 5, history.OK, 0).row("m6", 7, 4).row("m7", 7, 5)
	r.decide("m6", 7, 4, history.DecisionRedeliver, 0, false).decide("m6", 7, 4, history.DecisionApplied, 0, true)
	r.decide("m7", 7, 5, history.DecisionApplied, 0, false)
	r.q.Deliveries = append(r.q.Deliveries, history.Delivery{Consumer: 1, MessageID: "m7", Scope: "k", Token: 7, Sequence: 5,
		Outcome: history.DecisionDuplicate, Redelivered: true})
	res, c := r.check()
	if res.Violations != 0 {
		t.Fatalf("violations: %v", res.Examples)
	}
	if c.Redelivered != 2 || c.RedeliveredAfterKill != 1 || c.Requeued != 1 {
		t.Errorf("redelivered %d (%d after a kill), requeued %d; want 2 (1), 1", c.Redelivered, c.RedeliveredAfterKill, c.Requeued)
	}
	if res.Checked == 0 {
		t.Error("nothing checked")
	}
}
