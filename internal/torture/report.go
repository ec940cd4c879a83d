package torture

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/fencedio/fenced/internal/torture/check"
	"github.com/fencedio/fenced/internal/torture/history"
)

// Counts tallies operations by outcome.
type Counts struct {
	Total   int `json:"total"`
	OK      int `json:"ok"`
	Refused int `json:"refused"` // held (acquire), not found (renew, release), stale (writes)
	Failed  int `json:"failed"`  // certainly not applied for another reason
	Unknown int `json:"unknown"` // no answer: may or may not have taken effect
}

func (c *Counts) add(op *history.Op, refusal string) {
	c.Total++
	switch {
	case op.Outcome == history.OK:
		c.OK++
	case op.Outcome == history.Fail && op.Code == refusal:
		c.Refused++
	case op.Outcome == history.Fail:
		c.Failed++
	default:
		c.Unknown++
	}
}

// DelayedCounts describes the writes sent through the delaying proxy.
type DelayedCounts struct {
	Delivered int `json:"delivered"`
	Accepted  int `json:"accepted"`
	Stale     int `json:"stale"`
	Other     int `json:"other"` // another answer, or delivery failed
}

// Summary is the outcome of a run, as written to summary.json.
type Summary struct {
	RunID     string  `json:"runId"`
	Seed      uint64  `json:"seed"`
	Seconds   float64 `json:"seconds"`
	Workers   int     `json:"workers"`
	Keys      int     `json:"keys"`
	TTLMs     int64   `json:"ttlMs"`
	NoFencing bool    `json:"noFencing"`
	// Failpoints are the mutants switched on in the node: the run must
	// then report violations.
	Failpoints []string `json:"failpoints,omitempty"`
	// LoseUnsynced: kills were simulated power losses (Config.LoseUnsynced).
	LoseUnsynced bool `json:"loseUnsynced,omitempty"`
	// Endpoint lists the lease API of every node, comma-separated.
	Endpoint  string `json:"endpoint"`
	Nodes     int    `json:"nodes"`
	StoreURL  string `json:"storeUrl"`
	Postgres  bool   `json:"postgres"`
	OutputDir string `json:"outputDir"`

	// Operations counts every recorded operation: lease calls and writes.
	Operations   int    `json:"operations"`
	Acquisitions Counts `json:"acquisitions"` // OK = grants
	Renewals     Counts `json:"renewals"`
	Releases     Counts `json:"releases"`
	Gets         Counts `json:"gets"`
	// SessionCalls counts the acquisitions, renewals and releases carried
	// by Session streams (the others were unary calls).
	SessionCalls int    `json:"sessionCalls"`
	StoreWrites  Counts `json:"storeWrites"` // Refused = stale rejections seen by workers
	SQLWrites    Counts `json:"sqlWrites"`
	RedisWrites  Counts `json:"redisWrites"`
	// Publishes are the workers' publishes to the queue (Refused: nacked
	// by the broker); Queue tallies the queue path (nil: no queue).
	Publishes Counts             `json:"publishes"`
	Queue     *check.QueueCounts `json:"queue,omitempty"`
	// DelayedWrites are store writes that went through the proxy (also
	// counted in StoreWrites, where most are unknown: the worker gave up).
	DelayedWrites DelayedCounts `json:"delayedWrites"`
	FaultStats
	// StaleRejections counts every write refused as stale: by the store
	// (to workers and to the proxy), by PostgreSQL and Redis, and the
	// messages the queue consumer decided stale.
	StaleRejections int `json:"staleRejections"`

	Checks []check.Result `json:"checks"`
	// Violations is the total over all checkers; ViolationsByChecker
	// has it per checker.
	Violations          int            `json:"violations"`
	ViolationsByChecker map[string]int `json:"violationsByChecker"`
	// Linearizability has porcupine's result per key; the check was given
	// LinearizabilityTimeoutSeconds in all, and timed out (result unknown)
	// on UnknownKeys keys. A run with unknown keys is not clean.
	Linearizability               []check.LinearizabilityResult `json:"linearizability"`
	LinearizabilityTimeoutSeconds float64                       `json:"linearizabilityTimeoutSeconds"`
	UnknownKeys                   int                           `json:"unknownKeys"`
	// FirstViolationSeconds is when the earliest violation that has a time
	// happened, in seconds after the workers started (0: none).
	FirstViolationSeconds float64 `json:"firstViolationSeconds,omitempty"`
}

// Report is what Run returns.
type Report struct {
	Summary
}

// Check returns the named checker's result (zero if it did not run).
func (r *Report) Check(name string) check.Result {
	for _, c := range r.Checks {
		if c.Name == name {
			return c
		}
	}
	return check.Result{}
}

// expectedToFail are the checkers that a run without fencing must fail.
func expectedToFail(name string) bool {
	// Without fencing no guard refuses a resent copy as a duplicate
	// either.
	return name == check.NameStoreOrder || name == check.NameSQLOrder || name == check.NameRedisOrder || name == check.NameSequences ||
		name == check.NameQueue
}

// Passed reports the verdict. A run in which no lease was granted tested
// nothing and fails. A normal run passes with no violation at all.
// A negative control (NoFencing) passes when the store checker caught stale
// overwrites and every checker that does not depend on fencing found
// nothing.
func (r *Report) Passed() bool {
	if r.Acquisitions.OK == 0 {
		return false // nothing was tested
	}
	if !r.NoFencing {
		return r.Violations == 0 && r.UnknownKeys == 0
	}
	for _, c := range r.Checks {
		if !expectedToFail(c.Name) && c.Violations > 0 {
			return false
		}
	}
	return r.Check(check.NameStoreOrder).Violations > 0
}

func (e *engine) check(h *history.History, ev *check.Evidence, elapsed time.Duration) *Report {
	cfg := &e.cfg
	s := Summary{
		RunID: e.runID, Seed: cfg.Seed, Seconds: elapsed.Seconds(), Workers: cfg.Workers, Keys: cfg.Keys,
		TTLMs: cfg.TTL.Milliseconds(), NoFencing: cfg.NoFencing, Endpoint: strings.Join(e.endpoints(0), ","), StoreURL: e.storeURL,
		Nodes:    len(e.nodes),
		Postgres: ev.HasSQL, OutputDir: cfg.OutputDir, Failpoints: cfg.Failpoints, LoseUnsynced: cfg.LoseUnsynced,
	}
	e.mu.Lock()
	s.FaultStats = e.stats
	e.mu.Unlock()
	s.count(h, ev)
	s.Checks = append(s.Checks, check.StoreOrder(ev.Audit), check.Sequences(h, ev))
	if ev.HasSQL {
		s.Checks = append(s.Checks, check.SQLOrder(ev.SQLRows))
	} else {
		s.Checks = append(s.Checks, check.Result{Name: check.NameSQLOrder, Skipped: "no PostgreSQL configured"})
	}
	if ev.HasRedis {
		s.Checks = append(s.Checks, check.RedisOrder(ev.Redis))
	} else {
		s.Checks = append(s.Checks, check.Result{Name: check.NameRedisOrder, Skipped: "no Redis configured"})
	}
	if ev.Queue != nil {
		res, counts := check.QueueMessages(h, ev.Queue)
		s.Checks, s.Queue = append(s.Checks, res), &counts
		s.StaleRejections += counts.Stale
	} else {
		s.Checks = append(s.Checks, check.Result{Name: check.NameQueue, Skipped: "no queue configured"})
	}
	s.Checks = append(s.Checks, check.Provenance(h, ev), check.Tokens(h), check.AckedPresent(h, ev), check.Exclusion(h), check.Renewals(h), check.ClientDeadline(h))
	lin, res := check.Linearizability(h, cfg.CheckTimeout, cfg.OutputDir)
	s.Checks = append(s.Checks, lin)
	procs := check.Result{Name: check.NameProcesses, Checked: cfg.Workers + len(e.localNodes)}
	if e.storeProc != nil {
		procs.Checked++
	}
	if e.q != nil {
		procs.Checked++
	}
	e.mu.Lock()
	for _, c := range e.crashed {
		procs.AddViolation("%s", c)
	}
	e.mu.Unlock()
	s.Checks = append(s.Checks, procs)
	s.Checks = append(s.Checks, e.clusterChecks...)
	s.Linearizability = res
	s.LinearizabilityTimeoutSeconds = cfg.CheckTimeout.Seconds()
	s.UnknownKeys = lin.Unknown
	s.ViolationsByChecker = map[string]int{}
	var first int64
	for _, c := range s.Checks {
		s.Violations += c.Violations
		s.ViolationsByChecker[c.Name] = c.Violations
		if c.First != 0 && (first == 0 || c.First < first) {
			first = c.First
		}
	}
	if first != 0 {
		s.FirstViolationSeconds = max(time.Duration(first-e.start.UnixNano()), 0).Seconds()
	}
	if d := s.ackToKill; len(d) > 0 {
		slices.Sort(d)
		s.AckToKillMicros = float64(d[len(d)/2].Microseconds())
	}
	return &Report{Summary: s}
}

// count counts the operations by kind and outcome, and the delayed writes.
func (s *Summary) count(h *history.History, ev *check.Evidence) {
	s.Operations = len(h.Ops)
	for _, op := range h.Ops {
		if op.Via == history.ViaSession {
			s.SessionCalls++
		}
		switch op.Kind {
		case history.KindAcquire:
			s.Acquisitions.add(op, history.CodeHeld)
		case history.KindRenew:
			s.Renewals.add(op, history.CodeNotFound)
		case history.KindRelease:
			s.Releases.add(op, history.CodeNotFound)
		case history.KindGet:
			s.Gets.add(op, "")
		case history.KindPut:
			s.StoreWrites.add(op, history.CodeStale)
		case history.KindSQL:
			s.SQLWrites.add(op, history.CodeStale)
		case history.KindRedis:
			s.RedisWrites.add(op, history.CodeStale)
		case history.KindPublish:
			s.Publishes.add(op, history.CodeNacked)
		}
	}
	for _, d := range ev.Delayed {
		s.DelayedWrites.Delivered++
		switch {
		case d.Status/100 == 2:
			s.DelayedWrites.Accepted++
		case d.Status == 409:
			s.DelayedWrites.Stale++
		default:
			s.DelayedWrites.Other++
		}
	}
	s.StaleRejections = s.StoreWrites.Refused + s.SQLWrites.Refused + s.RedisWrites.Refused + s.DelayedWrites.Stale
}

func (r *Report) writeJSON(path string) error {
	b, err := json.MarshalIndent(r.Summary, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// WriteText writes the summary in words.
func (r *Report) WriteText(w io.Writer) {
	s := &r.Summary
	fencing := "fencing on"
	if s.NoFencing {
		fencing = "NEGATIVE CONTROL: fencing off at the resources"
	}
	fmt.Fprintf(w, "torture run %s (seed %d): %.1fs, %d workers, %d keys, TTL %v, %s\n",
		s.RunID, s.Seed, s.Seconds, s.Workers, s.Keys, time.Duration(s.TTLMs)*time.Millisecond, fencing)
	if len(s.Failpoints) > 0 {
		fmt.Fprintf(w, "  MUTANT: %s switched on in the node; the checkers must report violations\n", strings.Join(s.Failpoints, ", "))
	}
	if s.LoseUnsynced {
		fmt.Fprintln(w, "  kills are simulated power losses: writes not yet fsynced or committed are lost")
	}
	fmt.Fprintf(w, "  lease service %s: %d operations recorded\n", s.Endpoint, s.Operations)
	fmt.Fprintf(w, "    acquisitions, renewals and releases: %d over Session streams, the others unary\n", s.SessionCalls)
	fmt.Fprintf(w, "    acquisitions: %d attempts, %d grants, %d held, %d failed, %d unknown outcome\n",
		s.Acquisitions.Total, s.Acquisitions.OK, s.Acquisitions.Refused, s.Acquisitions.Failed, s.Acquisitions.Unknown)
	fmt.Fprintf(w, "    renewals: %d ok, %d refused, %d failed, %d unknown; releases: %d ok, %d not found, %d failed or unknown; reads: %d ok\n",
		s.Renewals.OK, s.Renewals.Refused, s.Renewals.Failed, s.Renewals.Unknown,
		s.Releases.OK, s.Releases.Refused, s.Releases.Failed+s.Releases.Unknown, s.Gets.OK)
	fmt.Fprintf(w, "  faults: %d node crashes (kill -9; %d aimed at acquisitions, %d with acquisitions in flight), %d store crashes, %d pauses (SIGSTOP longer than the TTL)\n",
		s.Crashes, s.AimedCrashes, s.CrashesDuringAcquisition, s.StoreCrashes, s.Pauses)
	if s.Nodes > 1 {
		c := s.Cluster
		fmt.Fprintf(w, "  cluster of %d nodes, faults (each healed, then the cluster whole again: %d times):\n", s.Nodes, c.Recoveries)
		fmt.Fprintf(w, "    kill -9: %d of the leader (%d with a follower at once), %d of a follower; leader SIGSTOP past the election timeout: %d; leadership handed away and back within a TTL: %d\n",
			c.LeaderKills, c.TwoDown, c.FollowerKills, c.LeaderPauses, c.LeaderReelections)
		fmt.Fprintf(w, "    partitions: leader isolated %d, follower isolated %d, moving minority/majority splits %d (%d splits); slow links %d\n",
			c.LeaderIsolations, c.FollowerIsolations, c.MovingSplits, c.SplitSteps, c.SlowLinks)
		fmt.Fprintf(w, "    rolling restarts %d (%d node restarts); members removed and added back %d; faults skipped for want of a leader %d\n",
			c.RollingRestarts, c.NodeRestarts, c.MemberReAdds, c.NoLeader)
		fmt.Fprintf(w, "    disk losses %d (the wiped member refused %d times, recovered as documented %d); leader kills aimed at an acknowledgement %d; holders frozen as a paused leader woke %d (after it renewed %d); leader log writes stalled while it was cut off %d\n",
			c.DiskLosses, c.WipedRefused, c.WipedRecovered, c.AimedLeaderKills, c.HoldersFrozen, c.RenewalsOnWaking, c.LeaderDiskStalls)
		writeOperatorStats(w, c.Operator)
	}
	if s.CrashesAfterNodeAck > 0 {
		fmt.Fprintf(w, "    %d kills timed from a node's acknowledgement (median %vµs after it)\n", s.CrashesAfterNodeAck, s.AckToKillMicros)
	}
	fmt.Fprintf(w, "    %d crashes right after an acknowledgement; snapshots: %d taken (%d forced just before a crash), %d restored; simulated power losses: %d\n",
		s.CrashesAfterAck, s.SnapshotsTaken, s.ForcedSnapshots, s.SnapshotRestores, s.PowerLosses)
	fmt.Fprintf(w, "    %d delayed writes delivered after the lease expired: %d accepted, %d rejected as stale, %d other\n",
		s.DelayedWrites.Delivered, s.DelayedWrites.Accepted, s.DelayedWrites.Stale, s.DelayedWrites.Other)
	fmt.Fprintf(w, "  writes: store %d acknowledged, %d stale, %d failed, %d unknown",
		s.StoreWrites.OK, s.StoreWrites.Refused, s.StoreWrites.Failed, s.StoreWrites.Unknown)
	if s.Postgres {
		fmt.Fprintf(w, "; postgres %d committed, %d stale, %d failed or unknown",
			s.SQLWrites.OK, s.SQLWrites.Refused, s.SQLWrites.Failed+s.SQLWrites.Unknown)
	}
	if s.RedisWrites.Total > 0 {
		fmt.Fprintf(w, "; redis %d acknowledged, %d stale, %d failed or unknown",
			s.RedisWrites.OK, s.RedisWrites.Refused, s.RedisWrites.Failed+s.RedisWrites.Unknown)
	}
	fmt.Fprintf(w, "\n  stale rejections: %d\n", s.StaleRejections)
	if q := s.Queue; q != nil {
		fmt.Fprintf(w, "  queue: %d messages published (%d confirmed, %d resends, %d through the delay queue); consumer: %d applied, %d stale, %d duplicate, %d refused, %d requeued, %d redelivered after a kill; %d left at the end; %d consumer kills (%d between commit and ack)\n",
			q.Published, q.Confirmed, q.Resent, q.Delayed, q.Applied, q.Stale, q.Duplicate, q.Refused, q.Requeued, q.RedeliveredAfterKill, q.Left, q.ConsumerKills, q.KillsAfterCommit)
	}
	fmt.Fprintln(w, "  checks:")
	for _, c := range s.Checks {
		writeCheck(w, c, s.NoFencing)
	}
	if s.FirstViolationSeconds > 0 {
		fmt.Fprintf(w, "  first violation: %.1fs after the workers started\n", s.FirstViolationSeconds)
	}
	fmt.Fprintf(w, "  result: %s\n  details: %s\n", r.verdict(), s.OutputDir)
}

// writeCheck writes one checker's result, with up to five examples.
func writeCheck(w io.Writer, c check.Result, noFencing bool) {
	status := "ok"
	switch {
	case c.Skipped != "":
		status = "skip"
	case c.Violations > 0 && noFencing && expectedToFail(c.Name):
		status = "FAIL*"
	case c.Violations > 0:
		status = "FAIL"
	}
	line := fmt.Sprintf("    %-5s %-29s %d checked, %d violations", status, c.Name, c.Checked, c.Violations)
	if status == "FAIL*" {
		line += " (expected without fencing)"
	}
	if c.Skipped != "" {
		line = fmt.Sprintf("    %-5s %-29s %s", status, c.Name, c.Skipped)
	}
	fmt.Fprintln(w, line)
	if c.Note != "" {
		fmt.Fprintf(w, "           note: %s\n", c.Note)
	}
	for _, ex := range c.Examples[:min(len(c.Examples), 5)] {
		fmt.Fprintf(w, "           - %s\n", strings.ReplaceAll(ex, "\n", "\n             "))
	}
	if c.Violations > 5 {
		fmt.Fprintf(w, "           (%d more in summary.json)\n", c.Violations-min(len(c.Examples), 5))
	}
}

// verdict says in a sentence whether the run passed.
func (r *Report) verdict() string {
	s := &r.Summary
	var verdict string
	switch {
	case s.Acquisitions.OK == 0:
		verdict = "FAIL: no lease was granted, so nothing was tested (see the workers' logs)"
	case !s.NoFencing && r.Passed():
		verdict = "PASS: no violations"
	case !s.NoFencing && s.Violations == 0:
		verdict = fmt.Sprintf("INCONCLUSIVE: no violations, but the linearizability check timed out on %d keys (raise --check-timeout)", s.UnknownKeys)
	case !s.NoFencing:
		verdict = fmt.Sprintf("FAIL: %d violations", s.Violations)
	case r.Passed():
		verdict = fmt.Sprintf("PASS: the checker caught %d stale overwrites, as it must without fencing", r.Check(check.NameStoreOrder).Violations)
	case r.Check(check.NameStoreOrder).Violations == 0:
		verdict = "FAIL: without fencing the checker found no stale overwrite (make the run longer, or the checker is broken)"
	default:
		var bad []string
		for _, c := range s.Checks {
			if c.Violations > 0 && !expectedToFail(c.Name) {
				bad = append(bad, c.Name)
			}
		}
		verdict = "FAIL: checkers that do not depend on fencing failed: " + strings.Join(bad, ", ")
	}
	return verdict
}
