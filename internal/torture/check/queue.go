package check

import (
	"fmt"
	"sort"

	"github.com/fencedio/fenced/internal/torture/history"
)

// NameQueue names QueueMessages's result.
const NameQueue = "queue-messages-fenced"

// MessageRow is a row of the run's messages table: a message the queue
// consumer applied, inserted in the fencesql guard's transaction. ID is
// taken from a sequence while the guard holds the scope's row lock, so a
// scope's rows in ID order are in commit order.
type MessageRow struct {
	ID        int64  `json:"id"`
	Scope     string `json:"scope"`
	Token     uint64 `json:"token"`
	Sequence  uint64 `json:"sequence,omitempty"`
	MessageID string `json:"messageId"`
	// Consumer is the incarnation of the consumer that applied it; At is
	// when its transaction began to commit (Unix ns).
	Consumer int   `json:"consumer"`
	At       int64 `json:"at"`
}

// QueueEvidence is what the queue path left: the consumer's table, its
// recorded decisions, what was still in the queues at the end, and the
// kills of the consumer.
type QueueEvidence struct {
	Rows       []MessageRow
	Deliveries []history.Delivery
	Left       []history.QueuedMessage
	// Kills counts the consumer's SIGKILLs; KillsAfterCommit those aimed
	// right after it recorded an applied message, before its ack.
	Kills, KillsAfterCommit int
}

// QueueCounts tallies the queue path of a run.
type QueueCounts struct {
	// Published counts distinct messages (a resent copy is the same
	// message); Confirmed those the broker confirmed at least once; Resent
	// the publishes that were resends after an unknown outcome; Delayed
	// the messages sent through the delay queue.
	Published int `json:"published"`
	Confirmed int `json:"confirmed"`
	Resent    int `json:"resent"`
	Delayed   int `json:"delayed"`
	// Applied counts the table's rows; Stale, Duplicate, Refused and
	// Requeued the consumer's other decisions.
	Applied   int `json:"applied"`
	Stale     int `json:"stale"`
	Duplicate int `json:"duplicate"`
	Refused   int `json:"refused"`
	Requeued  int `json:"requeued"`
	// Redelivered counts deliveries the broker flagged as delivered
	// before; RedeliveredAfterKill those of them that an earlier consumer
	// process had received and not settled.
	Redelivered          int `json:"redelivered"`
	RedeliveredAfterKill int `json:"redeliveredAfterKill"`
	// Left counts the messages still in a queue at the end; NeverSeen the
	// unconfirmed messages that nobody saw (never enqueued, most likely).
	Left             int `json:"left"`
	NeverSeen        int `json:"neverSeen"`
	ConsumerKills    int `json:"consumerKills"`
	KillsAfterCommit int `json:"killsAfterCommit"`
}

// msgKey is a message's stamp: scope, token and sequence.
type msgKey struct {
	scope      string
	token, seq uint64
}

// QueueMessages checks the queue path against the workers' publishes
// (history.KindPublish), the consumer's decisions and table, and what was
// left in the queues:
//
//   - per scope, in commit order, no applied message has a token below one
//     applied before it (a stale message applied);
//   - no (scope, token, sequence) is applied twice, and every applied
//     message was published, with that stamp;
//   - every decision has its reason: a stale one names a higher token that
//     was applied for its scope, a duplicate one was applied before, an
//     applied one is in the table, a refused one says why;
//   - none is lost: every message the broker confirmed is applied, decided
//     stale, duplicate or refused, or still in a queue at the end.
func QueueMessages(h *history.History, q *QueueEvidence) (Result, QueueCounts) {
	r := Result{Name: NameQueue}
	var c QueueCounts
	pubs := publishes(h, &c)
	applied := queueRows(&r, q.Rows, pubs)
	c.Applied = len(q.Rows)
	decided := queueDecisions(&r, q.Deliveries, applied, &c)
	seen := map[string]bool{} // applied or left, by message ID
	for _, row := range q.Rows {
		seen[row.MessageID] = true
	}
	for _, m := range q.Left {
		seen[m.MessageID] = true
	}
	c.Left = len(q.Left)
	ids := make([]string, 0, len(pubs))
	for id := range pubs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		p := pubs[id]
		r.Checked++
		switch {
		case seen[id] || decided[id]:
		case p.confirmed != nil:
			r.AddViolationAt(p.confirmed.Return, "lost message %s (scope %q, token %d, sequence %d): confirmed by the broker, never applied, settled or left in a queue",
				id, p.op.Key, p.op.Token, p.op.Sequence)
		default:
			c.NeverSeen++
		}
	}
	c.ConsumerKills, c.KillsAfterCommit = q.Kills, q.KillsAfterCommit
	r.Note = fmt.Sprintf("published %d (%d confirmed, %d resends, %d through the delay queue), applied %d, stale %d, duplicate %d, refused %d, requeued %d, redelivered %d (%d after a consumer kill), left in the queue %d, unconfirmed and never seen %d; consumer kills %d (%d between commit and ack)",
		c.Published, c.Confirmed, c.Resent, c.Delayed, c.Applied, c.Stale, c.Duplicate, c.Refused, c.Requeued,
		c.Redelivered, c.RedeliveredAfterKill, c.Left, c.NeverSeen, c.ConsumerKills, c.KillsAfterCommit)
	return r, c
}

// published is one message of the workers: its first publish and the
// first confirmed one (nil: none).
type published struct {
	op, confirmed *history.Op
}

// publishes indexes the workers' messages by ID and counts them.
func publishes(h *history.History, c *QueueCounts) map[string]*published {
	pubs := map[string]*published{}
	for _, op := range h.Ops {
		if op.Kind != history.KindPublish {
			continue
		}
		if op.ResendOf != 0 {
			c.Resent++
		}
		p := pubs[op.Object]
		if p == nil {
			p = &published{op: op}
			pubs[op.Object] = p
			c.Published++
			if op.Via == history.ViaDelayed {
				c.Delayed++
			}
		}
		if op.Outcome == history.OK && p.confirmed == nil {
			p.confirmed = op
			c.Confirmed++
		}
	}
	return pubs
}

// queueRows checks the table: order per scope, at most once per stamp,
// and provenance. It returns the rows by stamp.
func queueRows(r *Result, rows []MessageRow, pubs map[string]*published) map[msgKey]*MessageRow {
	rows = append([]MessageRow(nil), rows...)
	sort.Slice(rows, func(i, j int) bool { return rows[i].ID < rows[j].ID })
	applied := map[msgKey]*MessageRow{}
	highest := map[string]*MessageRow{}
	for i := range rows {
		row := &rows[i]
		r.Checked++
		if h := highest[row.Scope]; h != nil && row.Token < h.Token {
			r.AddViolationAt(row.At, "stale message applied: row %d (message %s), scope %q: token %d committed after token %d (row %d, message %s)",
				row.ID, row.MessageID, row.Scope, row.Token, h.Token, h.ID, h.MessageID)
		}
		if h := highest[row.Scope]; h == nil || row.Token > h.Token {
			highest[row.Scope] = row
		}
		k := msgKey{row.Scope, row.Token, row.Sequence}
		if first := applied[k]; first != nil {
			r.AddViolationAt(row.At, "message applied twice: scope %q token %d sequence %d in rows %d (message %s) and %d (message %s)",
				row.Scope, row.Token, row.Sequence, first.ID, first.MessageID, row.ID, row.MessageID)
		} else {
			applied[k] = row
		}
		p := pubs[row.MessageID]
		switch {
		case p == nil:
			r.AddViolationAt(row.At, "row %d: message %s (scope %q, token %d) was published by no worker of this run", row.ID, row.MessageID, row.Scope, row.Token)
		case p.op.Key != row.Scope || p.op.Token != row.Token || p.op.Sequence != row.Sequence:
			r.AddViolationAt(row.At, "row %d: message %s applied as scope %q token %d sequence %d, but w%d published it as scope %q token %d sequence %d",
				row.ID, row.MessageID, row.Scope, row.Token, row.Sequence, p.op.Worker, p.op.Key, p.op.Token, p.op.Sequence)
		}
	}
	return applied
}

// queueDecisions checks that every decision of the consumer has its
// reason, counts them, and returns the messages settled for good (decided
// stale, duplicate or refused).
func queueDecisions(r *Result, ds []history.Delivery, applied map[msgKey]*MessageRow, c *QueueCounts) map[string]bool {
	done := map[string]bool{}
	last := map[string]history.Delivery{} // each message's previous decision
	type scopeToken struct {
		scope string
		token uint64
	}
	tokens := map[scopeToken]bool{} // applied tokens per scope
	for k := range applied {
		tokens[scopeToken{k.scope, k.token}] = true
	}
	for _, d := range ds {
		r.Checked++
		k := msgKey{d.Scope, d.Token, d.Sequence}
		if d.Redelivered {
			c.Redelivered++
			if prev, seen := last[d.MessageID]; !seen || prev.Consumer != d.Consumer || prev.Outcome != history.DecisionRedeliver {
				c.RedeliveredAfterKill++
			}
		}
		last[d.MessageID] = d
		switch d.Outcome {
		case history.DecisionApplied:
			if applied[k] == nil {
				r.AddViolationAt(d.At, "message %s (scope %q, token %d, sequence %d) decided applied, but nothing of it committed", d.MessageID, d.Scope, d.Token, d.Sequence)
			}
		case history.DecisionStale:
			c.Stale++
			done[d.MessageID] = true
			if d.Highest <= d.Token || !tokens[scopeToken{d.Scope, d.Highest}] {
				r.AddViolationAt(d.At, "message %s (scope %q, token %d) decided stale against highest token %d, which no applied message of the scope carries", d.MessageID, d.Scope, d.Token, d.Highest)
			}
		case history.DecisionDuplicate:
			c.Duplicate++
			done[d.MessageID] = true
			if applied[k] == nil {
				r.AddViolationAt(d.At, "lost message %s: scope %q token %d sequence %d refused as a duplicate, but never applied", d.MessageID, d.Scope, d.Token, d.Sequence)
			}
		case history.DecisionRefused:
			c.Refused++
			done[d.MessageID] = true
			if d.Err == "" {
				r.AddViolationAt(d.At, "message %s refused without a reason", d.MessageID)
			}
		case history.DecisionRedeliver:
			c.Requeued++
		default:
			r.AddViolationAt(d.At, "message %s: unknown decision %q", d.MessageID, d.Outcome)
		}
	}
	return done
}
