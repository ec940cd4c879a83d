package check

import (
	"bytes"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/fencedio/fenced/internal/torture/history"
	"github.com/fencedio/fenced/store"
)

// Checker names, as they appear in the summary.
const (
	NameStoreOrder      = "store-no-stale-overwrite"
	NameSQLOrder        = "postgres-no-stale-overwrite"
	NameRedisOrder      = "redis-no-stale-overwrite"
	NameProvenance      = "token-provenance"
	NameTokens          = "tokens-unique-and-ordered"
	NameAckedPresent    = "acked-writes-present"
	NameLinearizability = "lease-linearizable"
	NameExclusion       = "lease-exclusion"
	NameRenewals        = "renewals-honoured"
	NameSequences       = "sequenced-writes-at-most-once"
	// NameProcesses fails for every worker, node or store process that
	// exited on its own (a panic in the client library, say) or with an
	// error when asked to stop (a data race under -race, say).
	NameProcesses = "processes-healthy"
)

// maxExamples bounds the violations listed per checker.
const maxExamples = 20

// Result is one checker's verdict.
type Result struct {
	Name string `json:"name"`
	// Checked counts what was examined (records, grants, keys...).
	Checked    int `json:"checked"`
	Violations int `json:"violations"`
	// Examples describe the first violations.
	Examples []string `json:"examples,omitempty"`
	// Skipped says why the checker did not run (for instance: no
	// PostgreSQL configured).
	Skipped string `json:"skipped,omitempty"`
	// Note adds context, such as keys whose check timed out.
	Note string `json:"note,omitempty"`
	// Unknown counts what could not be checked (keys whose
	// linearizability check timed out): a run with any is not clean.
	Unknown int `json:"unknown,omitempty"`
	// First is when the earliest violation that has a time happened (Unix
	// ns; 0: none, or none with a time).
	First int64 `json:"first,omitempty"`
}

// AddViolation counts a violation and keeps its description among the
// first examples.
func (r *Result) AddViolation(format string, args ...any) {
	r.AddViolationAt(0, format, args...)
}

// AddViolationAt is AddViolation at time at (Unix ns; 0 when it has none).
func (r *Result) AddViolationAt(at int64, format string, args ...any) {
	r.Violations++
	if at != 0 && (r.First == 0 || at < r.First) {
		r.First = at
	}
	if len(r.Examples) < maxExamples {
		r.Examples = append(r.Examples, fmt.Sprintf(format, args...))
	}
}

// SQLRow is one row of the run's PostgreSQL writes table, in commit order
// per scope (ID is taken from a sequence while the scope's row lock is held).
type SQLRow struct {
	ID     int64  `json:"id"`
	Scope  string `json:"scope"`
	Token  uint64 `json:"token"`
	Worker int    `json:"worker"`
	Object string `json:"object"`
	// Sequence is the write's sequence under Token (0: none).
	Sequence uint64 `json:"sequence,omitempty"`
}

// RedisRecord is an item of a scope's Redis audit list: a write the
// Redis guard applied, Index-th in the order Redis applied the scope's
// writes.
type RedisRecord struct {
	Index    int    `json:"index"`
	Scope    string `json:"scope"`
	Token    uint64 `json:"token"`
	Sequence uint64 `json:"sequence,omitempty"`
	Worker   int    `json:"worker"`
	Object   string `json:"object"`
}

// FinalObject is an object read back from the store at the end of a run.
type FinalObject struct {
	Present bool
	Token   uint64
	Value   []byte
}

// Evidence is what the resources hold at the end of a run.
type Evidence struct {
	// Audit is the store's audit log (nil: the store was not read).
	Audit []store.AuditRecord
	// Objects maps each object whose write was acknowledged to what the
	// store returned for it at the end.
	Objects map[string]FinalObject
	// SQLRows is the PostgreSQL writes table (nil with HasSQL false).
	SQLRows []SQLRow
	HasSQL  bool
	// Redis holds the Redis audit lists, scope by scope in applied order
	// (nil with HasRedis false).
	Redis    []RedisRecord
	HasRedis bool
	// Delayed lists the writes the delaying proxy delivered.
	Delayed []history.DelayedWrite
	// Queue is what the queue path left (nil: no queue).
	Queue *QueueEvidence
}

// grantKey identifies a token granted to a worker for a key.
type grantKey struct {
	worker int
	key    string
	token  uint64
}

func grants(h *history.History) []*history.Op {
	var out []*history.Op
	for _, op := range h.Ops {
		if op.Kind == history.KindAcquire && op.Outcome == history.OK {
			out = append(out, op)
		}
	}
	return out
}

// StoreOrder checks the store's audit log: per scope, in commit order,
// no accepted write has a token below one accepted before it, and each
// record's HighestBefore agrees with the log.
func StoreOrder(audit []store.AuditRecord) Result {
	r := Result{Name: NameStoreOrder, Checked: len(audit)}
	recs := append([]store.AuditRecord(nil), audit...)
	sort.Slice(recs, func(i, j int) bool { return recs[i].Seq < recs[j].Seq })
	highest := map[string]uint64{}
	by := map[string]uint64{} // seq of the write that set highest
	for _, rec := range recs {
		h := highest[rec.Scope]
		if rec.Token < h {
			r.AddViolation("stale overwrite: audit seq %d, scope %q, object %q: token %d accepted after token %d (seq %d)",
				rec.Seq, rec.Scope, rec.Object, rec.Token, h, by[rec.Scope])
		} else if rec.HighestBefore != h {
			r.AddViolation("audit seq %d, scope %q: highestBefore %d, but the log's highest before it is %d",
				rec.Seq, rec.Scope, rec.HighestBefore, h)
		}
		if rec.Token > h {
			highest[rec.Scope], by[rec.Scope] = rec.Token, rec.Seq
		}
	}
	return r
}

// Sequences checks that a write that carried a sequence was applied at
// most once per (scope, token, sequence): in the store's audit log and,
// when they are driven, in the PostgreSQL writes table and the Redis audit
// lists. Workers resend a sequenced write
// whose outcome they do not know (history.Op.ResendOf) with the same
// token, sequence and object; a copy of one applied must have been refused
// as a duplicate. The note counts the resends and how they were answered,
// so that a run in which none was sent shows it. A violation is timed at
// the first resend of that write.
func Sequences(h *history.History, ev *Evidence) Result {
	r := Result{Name: NameSequences}
	type key struct {
		scope      string
		token, seq uint64
	}
	resent := map[string]int64{} // kind and object -> call of the first resend
	type tally struct{ resends, duplicate, applied, stale, unknown int }
	var counts = map[history.Kind]*tally{history.KindPut: {}, history.KindSQL: {}, history.KindRedis: {}}
	for _, op := range h.Ops {
		c := counts[op.Kind]
		if c == nil || op.ResendOf == 0 {
			continue
		}
		c.resends++
		switch {
		case op.Outcome == history.OK && op.Code == history.CodeDuplicate:
			c.duplicate++
		case op.Outcome == history.OK:
			c.applied++
		case op.Code == history.CodeStale:
			c.stale++
		case op.Outcome != history.Fail:
			c.unknown++
		}
		k := string(op.Kind) + "\x00" + op.Object
		if at, ok := resent[k]; !ok || op.Call < at {
			resent[k] = op.Call
		}
	}
	twice := map[string]int{} // per resource
	first := map[key]uint64{}
	for _, rec := range ev.Audit {
		if rec.Sequence == 0 {
			continue
		}
		r.Checked++
		k := key{rec.Scope, rec.Token, rec.Sequence}
		if seq, dup := first[k]; dup {
			twice["store"]++
			r.AddViolationAt(resent[string(history.KindPut)+"\x00"+rec.Object], "store: scope %q token %d sequence %d applied twice: audit seq %d (object %q) and %d",
				rec.Scope, rec.Token, rec.Sequence, rec.Seq, rec.Object, seq)
			continue
		}
		first[k] = rec.Seq
	}
	rows := map[key]int64{}
	for _, row := range ev.SQLRows {
		if row.Sequence == 0 {
			continue
		}
		r.Checked++
		k := key{row.Scope, row.Token, row.Sequence}
		if id, dup := rows[k]; dup {
			twice["postgres"]++
			r.AddViolationAt(resent[string(history.KindSQL)+"\x00"+row.Object], "postgres: scope %q token %d sequence %d applied twice: rows %d and %d (object %q)",
				row.Scope, row.Token, row.Sequence, id, row.ID, row.Object)
			continue
		}
		rows[k] = row.ID
	}
	items := map[key]int{}
	for _, rec := range ev.Redis {
		if rec.Sequence == 0 {
			continue
		}
		r.Checked++
		k := key{rec.Scope, rec.Token, rec.Sequence}
		if i, dup := items[k]; dup {
			twice["redis"]++
			r.AddViolationAt(resent[string(history.KindRedis)+"\x00"+rec.Object], "redis: scope %q token %d sequence %d applied twice: items %d and %d (object %q)",
				rec.Scope, rec.Token, rec.Sequence, i, rec.Index, rec.Object)
			continue
		}
		items[k] = rec.Index
	}
	p, q, x := counts[history.KindPut], counts[history.KindSQL], counts[history.KindRedis]
	r.Note = fmt.Sprintf("resends: store %d (%d refused as duplicates, %d applied, %d stale, %d unknown), postgres %d (%d, %d, %d, %d), redis %d (%d, %d, %d, %d)",
		p.resends, p.duplicate, p.applied, p.stale, p.unknown, q.resends, q.duplicate, q.applied, q.stale, q.unknown,
		x.resends, x.duplicate, x.applied, x.stale, x.unknown)
	if r.Violations > 0 {
		r.Note += fmt.Sprintf("; applied twice: store %d, postgres %d, redis %d", twice["store"], twice["postgres"], twice["redis"])
	}
	return r
}

// RedisOrder is StoreOrder for the Redis audit lists: per scope, in the
// order Redis applied them, no write has a token below one applied before
// it.
func RedisOrder(recs []RedisRecord) Result {
	r := Result{Name: NameRedisOrder, Checked: len(recs)}
	highest := map[string]RedisRecord{}
	for _, rec := range recs {
		h, seen := highest[rec.Scope]
		if seen && rec.Token < h.Token {
			r.AddViolation("stale overwrite: redis item %d of scope %q, object %q: token %d applied after token %d (item %d)",
				rec.Index, rec.Scope, rec.Object, rec.Token, h.Token, h.Index)
		}
		if !seen || rec.Token > h.Token {
			highest[rec.Scope] = rec
		}
	}
	return r
}

// SQLOrder is StoreOrder for the PostgreSQL writes table.
func SQLOrder(rows []SQLRow) Result {
	r := Result{Name: NameSQLOrder, Checked: len(rows)}
	rows = append([]SQLRow(nil), rows...)
	sort.Slice(rows, func(i, j int) bool { return rows[i].ID < rows[j].ID })
	highest := map[string]SQLRow{}
	for _, row := range rows {
		h := highest[row.Scope]
		if row.Token < h.Token {
			r.AddViolation("stale overwrite: row %d, scope %q, object %q: token %d committed after token %d (row %d)",
				row.ID, row.Scope, row.Object, row.Token, h.Token, h.ID)
		}
		if row.Token > h.Token {
			highest[row.Scope] = row
		}
	}
	return r
}

// Provenance checks that every write the resources accepted carries a
// token that the lease service granted, for that key, to the worker that
// sent the write.
func Provenance(h *history.History, ev *Evidence) Result {
	r := Result{Name: NameProvenance}
	granted := map[grantKey]bool{}
	for _, g := range grants(h) {
		granted[grantKey{g.Worker, g.Key, g.Token}] = true
	}
	writes := map[string]*history.Op{}
	for _, op := range h.Ops {
		if op.Kind == history.KindPut || op.Kind == history.KindSQL || op.Kind == history.KindRedis {
			writes[string(op.Kind)+"\x00"+op.Object] = op
		}
	}
	check := func(kind history.Kind, where, object, scope string, token uint64, worker int) {
		r.Checked++
		w, ok := writes[string(kind)+"\x00"+object]
		switch {
		case !ok:
			r.AddViolation("%s: %q (scope %q, token %d) was written by no worker of this run", where, object, scope, token)
		case w.Key != scope || w.Token != token || (worker >= 0 && worker != w.Worker):
			r.AddViolation("%s: %q has scope %q token %d, but worker %d sent scope %q token %d",
				where, object, scope, token, w.Worker, w.Key, w.Token)
		case !granted[grantKey{w.Worker, scope, token}]:
			r.AddViolation("%s: %q: token %d for %q was never granted to worker %d", where, object, token, scope, w.Worker)
		}
	}
	for _, rec := range ev.Audit {
		check(history.KindPut, fmt.Sprintf("store audit seq %d", rec.Seq), rec.Object, rec.Scope, rec.Token, -1)
	}
	for _, row := range ev.SQLRows {
		check(history.KindSQL, fmt.Sprintf("postgres row %d", row.ID), row.Object, row.Scope, row.Token, row.Worker)
	}
	for _, rec := range ev.Redis {
		check(history.KindRedis, fmt.Sprintf("redis item %d of %q", rec.Index, rec.Scope), rec.Object, rec.Scope, rec.Token, rec.Worker)
	}
	return r
}

// Tokens checks the tokens of all grants: no token was granted twice
// (for one key, or across keys, since tokens are log indexes), and per key,
// a grant that completed before another began has the lower token.
func Tokens(h *history.History) Result {
	gs := grants(h)
	r := Result{Name: NameTokens, Checked: len(gs)}
	seen := map[uint64]*history.Op{}
	for _, g := range gs {
		if prev, ok := seen[g.Token]; ok {
			r.AddViolationAt(g.Return, "token %d granted twice: %s and %s", g.Token, prev, g)
			continue
		}
		seen[g.Token] = g
	}
	byKey := map[string][]*history.Op{}
	for _, g := range gs {
		byKey[g.Key] = append(byKey[g.Key], g)
	}
	for _, list := range byKey {
		// After sorting by return time, a grant B that began after A
		// returned must have a higher token than A, and than every grant
		// that returned before A too, so keeping the running maximum of
		// returned grants is enough.
		sort.Slice(list, func(i, j int) bool { return list[i].Call < list[j].Call })
		byRet := append([]*history.Op(nil), list...)
		sort.Slice(byRet, func(i, j int) bool { return byRet[i].Return < byRet[j].Return })
		var best *history.Op
		j := 0
		for _, b := range list {
			for j < len(byRet) && byRet[j].Return < b.Call {
				if best == nil || byRet[j].Token > best.Token {
					best = byRet[j]
				}
				j++
			}
			if best != nil && b.Token <= best.Token {
				r.AddViolationAt(b.Return, "key %q: %s began after %s returned, but its token is not higher", b.Key, b, best)
			}
		}
	}
	return r
}

// AckedPresent checks that every write the store acknowledged (to a
// worker, or to the delaying proxy) is in the store at the end, and that
// every SQL write whose commit was acknowledged is in the table.
func AckedPresent(h *history.History, ev *Evidence) Result {
	r := Result{Name: NameAckedPresent}
	puts := map[string]*history.Op{}
	for _, op := range h.Ops {
		if op.Kind == history.KindPut {
			puts[op.Object] = op
		}
	}
	checkObject := func(name string, token uint64, who string) {
		r.Checked++
		obj, ok := ev.Objects[name]
		switch {
		case !ok || !obj.Present:
			r.AddViolation("%s: acknowledged write %q (token %d) is missing at the end", who, name, token)
		case obj.Token != token:
			r.AddViolation("%s: %q holds token %d at the end, acknowledged write had %d", who, name, obj.Token, token)
		default:
			if p, ok := puts[name]; ok && !bytes.Equal(obj.Value, history.ObjectValue(p)) {
				r.AddViolation("%s: %q holds %q at the end, acknowledged write had %q", who, name, obj.Value, history.ObjectValue(p))
			}
		}
	}
	if ev.Objects != nil {
		for _, op := range h.Ops {
			if op.Kind == history.KindPut && op.Outcome == history.OK {
				checkObject(op.Object, op.Token, fmt.Sprintf("w%d", op.Worker))
			}
		}
		for _, d := range ev.Delayed {
			if d.Status/100 == 2 {
				checkObject(d.Object, d.Token, "delaying proxy")
			}
		}
	}
	if ev.HasSQL {
		rows := map[string]bool{}
		for _, row := range ev.SQLRows {
			rows[row.Object] = true
		}
		for _, op := range h.Ops {
			if op.Kind == history.KindSQL && op.Outcome == history.OK {
				r.Checked++
				if !rows[op.Object] {
					r.AddViolation("w%d: committed SQL write %q (token %d) is missing at the end", op.Worker, op.Object, op.Token)
				}
			}
		}
	}
	if ev.HasRedis {
		items := map[string]bool{}
		for _, rec := range ev.Redis {
			items[rec.Object] = true
		}
		for _, op := range h.Ops {
			if op.Kind == history.KindRedis && op.Outcome == history.OK {
				r.Checked++
				if !items[op.Object] {
					r.AddViolation("w%d: acknowledged Redis write %q (token %d) is missing at the end", op.Worker, op.Object, op.Token)
				}
			}
		}
	}
	return r
}

// exclusionTolerance absorbs the difference between the wall clock the
// history is stamped with and the clock the server expires leases by: 2ms,
// plus 1000 ppm of the TTL for clock-rate differences (NTP slewing, or the
// crystal of another machine running the node).
func exclusionTolerance(ttl time.Duration) time.Duration { return 2*time.Millisecond + ttl/1000 }

// Exclusion checks lease timing: a lease stays exclusive at least until
// its holder's conservative deadline. For each grant A of a key, A is
// certainly current until the earliest of its release (once sent) and TTL
// after the send time of its last acknowledged renewal (or of the
// acquisition). The next grant of the key, by token, must not have
// returned before that. A violation means that the service expired or
// re-granted a lease while its holder was still entitled to it.
func Exclusion(h *history.History) Result {
	gs := grants(h)
	r := Result{Name: NameExclusion, Checked: len(gs)}
	type span struct {
		g   *history.Op
		end int64
	}
	lastRenew := map[string]int64{}
	released := map[string]int64{}
	for _, op := range h.Ops {
		switch {
		case op.Kind == history.KindRenew && op.Outcome == history.OK:
			lastRenew[op.Owner] = max(lastRenew[op.Owner], op.Call)
		case op.Kind == history.KindRelease && !(op.Outcome == history.Fail):
			if t, ok := released[op.Owner]; !ok || op.Call < t {
				released[op.Owner] = op.Call
			}
		}
	}
	byKey := map[string][]span{}
	for _, g := range gs {
		end := max(g.Call, lastRenew[g.Owner]) + g.TTLMs*int64(time.Millisecond)
		if t, ok := released[g.Owner]; ok && t < end {
			end = t
		}
		byKey[g.Key] = append(byKey[g.Key], span{g, end})
	}
	for key, spans := range byKey {
		sort.Slice(spans, func(i, j int) bool { return spans[i].g.Token < spans[j].g.Token })
		for i := 1; i < len(spans); i++ {
			a, b := spans[i-1], spans[i]
			if b.g.Return < a.end-int64(exclusionTolerance(time.Duration(a.g.TTLMs)*time.Millisecond)) {
				r.AddViolationAt(b.g.Return, "key %q: %s returned %v before %s (token %d) was due to end",
					key, b.g, time.Duration(a.end-b.g.Return), a.g.Owner, a.g.Token)
			}
		}
	}
	return r
}

// Renewals checks that every acknowledged grant and renewal is
// honoured: once it returned, the lease stays current until TTL after it
// was sent (the server counts the TTL from when it received it, which is
// later). A renewal or release of the same lease that the server answered
// "not found" before that deadline, with no release of the lease sent
// before that answer, is a violation. lease-exclusion sees such a bug only
// when another worker is granted the key in the gap; this check sees it
// from the holder's own next renewal.
func Renewals(h *history.History) Result {
	r := Result{Name: NameRenewals}
	type leaseOps struct{ acked, gone, released []*history.Op }
	byOwner := map[string]*leaseOps{}
	get := func(owner string) *leaseOps {
		if byOwner[owner] == nil {
			byOwner[owner] = &leaseOps{}
		}
		return byOwner[owner]
	}
	for _, op := range h.Ops {
		switch {
		case (op.Kind == history.KindAcquire || op.Kind == history.KindRenew) && op.Outcome == history.OK:
			get(op.Owner).acked = append(get(op.Owner).acked, op)
		case (op.Kind == history.KindRenew || op.Kind == history.KindRelease) && op.Outcome == history.Fail && op.Code == history.CodeNotFound:
			get(op.Owner).gone = append(get(op.Owner).gone, op)
		}
		if op.Kind == history.KindRelease {
			get(op.Owner).released = append(get(op.Owner).released, op)
		}
	}
	for owner, l := range byOwner {
		r.Checked += len(l.acked)
		for _, x := range l.gone {
			if slices.ContainsFunc(l.released, func(rel *history.Op) bool { return rel != x && rel.Call < x.Return }) {
				continue
			}
			var last *history.Op
			for _, a := range l.acked {
				if a.Finished() && a.Return < x.Call && (last == nil || a.Call > last.Call) {
					last = a
				}
			}
			if last == nil {
				continue
			}
			// A renewal answers with the lease's TTL; fall back on the
			// grant's.
			ttl := time.Duration(last.TTLMs) * time.Millisecond
			for _, a := range l.acked {
				if ttl == 0 && a.Kind == history.KindAcquire {
					ttl = time.Duration(a.TTLMs) * time.Millisecond
				}
			}
			due := last.Call + int64(ttl)
			if ttl > 0 && x.Return < due-int64(exclusionTolerance(ttl)) {
				r.AddViolationAt(x.Return, "lease %s of %q: %s answered not found %v before the deadline set by %s",
					owner, x.Key, x, time.Duration(due-x.Return), last)
			}
		}
	}
	return r
}

// Linearizability runs LinearizablePerKey and summarizes it. A key
// whose check timed out is no violation, but the run is not clean
// (Report.Passed): its Note names the keys.
func Linearizability(h *history.History, timeout time.Duration, dir string) (Result, []LinearizabilityResult) {
	res := LinearizablePerKey(h, timeout, dir)
	r := Result{Name: NameLinearizability}
	var unknown []string
	windows, unknownWindows := 0, 0
	for _, k := range res {
		r.Checked += k.Operations
		windows += k.Windows
		unknownWindows += k.UnknownWindows
		switch k.Result {
		case porcupine.Illegal:
			msg := fmt.Sprintf("key %q: history of %d operations is not linearizable", k.Key, k.Operations)
			if k.Visualization != "" {
				msg += "; see " + k.Visualization
			}
			if k.Explanation != "" {
				msg += "\n" + k.Explanation
			}
			r.AddViolationAt(k.FirstIllegal, "%s", msg)
		case porcupine.Unknown:
			unknown = append(unknown, k.Key)
		}
	}
	r.Unknown = len(unknown)
	r.Note = fmt.Sprintf("%d keys in %d windows, %v in all", len(res), windows, timeout)
	if len(unknown) > 0 {
		r.Note += fmt.Sprintf("; check timed out (result unknown) in %d windows, of keys %q", unknownWindows, unknown)
	}
	return r, res
}
