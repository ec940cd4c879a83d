package torture

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/api/fenced/v1/fencedv1connect"
	"github.com/fencedio/fenced/internal/testutil"
	"github.com/fencedio/fenced/internal/torture/check"
	"github.com/fencedio/fenced/internal/torture/proc"
)

// Operators' mistakes
//
// The faults of this file are what an operator does to a member's data
// directory, or to where a node is pointed: each must be refused by the
// nodes (a member that refuses to start, or peers that refuse its
// connections), and the run's history checkers show that no grant was
// forgotten meanwhile. NameOperatorRefused proves that each was refused.
// After the refusal each is recovered as documented (docs/clusters.md,
// "Recovering a member that lost its disk"): member remove, empty data
// directory, --join, member add.
//
//   - wal-loss: a member's raft log (wal/) is deleted while it is down and
//     its identity (member.json) kept, then it is started with its usual
//     command line when its vote decides. It must refuse to start.
//   - rollback: a member is started on an older (cold) copy of its own
//     data directory; the leader it acknowledged entries to since must
//     refuse it (GET /v1/role rolledBack).
//   - foreign-cluster: a node of another cluster is pointed at this
//     cluster's peers: a member restarted on a directory restored from a
//     backup of this cluster (fenced restore: a new cluster), or a
//     foreign cluster of one asked to add this cluster's members, and
//     this cluster asked to add it. Every member must refuse it ("peer
//     belongs to another cluster").
//   - cluster-restore (at the end of the run): see restorePhase.

// Checker names of the operator faults.
const (
	// NameOperatorRefused fails for every operator fault that was not
	// refused as it must be (a member with a lost log that started, a
	// rolled-back member its leader did not name, a member of another
	// cluster that some member did not refuse).
	NameOperatorRefused = "operator-mistakes-refused"
	// NameRestoreTokens fails when a cluster restored from a backup (the
	// cluster-restore phase) forgot a key's last token, issued a token at
	// or below one the old cluster issued, or was led by a member that was
	// not restored.
	NameRestoreTokens = "restores-keep-tokens"
)

// operatorFaultKinds are the kinds of this file, asked for by name.
// cluster-restore runs once, at the end of the run (restorePhase).
var operatorFaultKinds = []string{"wal-loss", "rollback", "foreign-cluster", "cluster-restore"}

// operatorByNameOnly are the operator kinds left out of the default mix:
// wal-loss and rollback take a member out for seconds each time and end in
// a member remove and add, and cluster-restore replaces the cluster at the
// end of the run. foreign-cluster heals within a second and is in it.
var operatorByNameOnly = []string{"wal-loss", "rollback", "cluster-restore"}

// endPhaseKinds run after the workers stopped, not during the run.
var endPhaseKinds = []string{"cluster-restore"}

// runKinds are the kinds the fault loop injects during the run.
func runKinds(kinds []string) []string {
	return slices.DeleteFunc(slices.Clone(kinds), func(k string) bool { return slices.Contains(endPhaseKinds, k) })
}

// OperatorFaultStats counts the operator faults (Nodes > 1).
type OperatorFaultStats struct {
	// WalLosses deleted a member's wal/ and kept its member.json;
	// WalLossRefused counts the members that then refused to start, and
	// WalLossRecovered those recovered as documented.
	WalLosses        int `json:"walLosses"`
	WalLossRefused   int `json:"walLossRefused"`
	WalLossRecovered int `json:"walLossRecovered"`
	// Rollbacks started a member on an older copy of its own directory;
	// RollbackRefused counts those its leader named as rolled back.
	// RollbackLeaderMoved counts the faults that would have left the
	// detectable domain because the leader changed, before the copy was
	// put back (then it is not) or before the refusal was seen (then it
	// is not checked).
	Rollbacks           int `json:"rollbacks"`
	RollbackRefused     int `json:"rollbackRefused"`
	RollbackLeaderMoved int `json:"rollbackLeaderMoved"`
	RollbackRecovered   int `json:"rollbackRecovered"`
	// ForeignClusters showed this cluster's members a node of another
	// cluster: ForeignRestored a member restarted on a directory restored
	// from a backup, ForeignNodes a foreign cluster of one and member
	// add both ways. ForeignRefusals counts the members seen refusing it.
	ForeignClusters int `json:"foreignClusters"`
	ForeignRestored int `json:"foreignRestored"`
	ForeignNodes    int `json:"foreignNodes"`
	ForeignRefusals int `json:"foreignRefusals"`
	// ClusterRestores counts the end-of-run restore phases (0 or 1), and
	// RestoreRefusals the members seen refusing a member of the old
	// cluster or of another backup in it.
	ClusterRestores int `json:"clusterRestores"`
	RestoreRefusals int `json:"restoreRefusals"`
}

// operatorState is what the operator faults found; guarded by mu.
type operatorState struct {
	mu      sync.Mutex
	checked int         // refusals expected and looked for
	missed  []timedNote // refusals that did not come
	notes   []string    // refusals seen, one per fault
	// foreignTurn alternates the two ways of foreign-cluster.
	foreignTurn int
}

// expectSeen is expect for a note that says what should have been seen:
// when it was not, the violation says so.
func (o *operatorState) expectSeen(seen bool, note string, args ...any) {
	if !seen {
		note = "expected and not seen: " + note
	}
	o.expect(seen, note, args...)
}

// expect records a refusal looked for: seen (note says what was seen), or
// not (note says what went wrong).
func (o *operatorState) expect(refused bool, note string, args ...any) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.checked++
	what := fmt.Sprintf(note, args...)
	if refused {
		o.notes = append(o.notes, what)
	} else {
		o.missed = append(o.missed, timedNote{time.Now().UnixNano(), what})
	}
}

// missedCount is how many refusals looked for have not come so far.
func (o *operatorState) missedCount() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.missed)
}

// operatorFault injects the operator fault kind; ok is false for another
// kind. A fault once begun runs to its end, and its checks are made, even
// if the run ends meanwhile: a run's end is no refusal, and every step
// has its own bound.
func (e *engine) operatorFault(ctx context.Context, kind string, leader int) (what string, ok bool) {
	ctx = context.WithoutCancel(ctx)
	switch kind {
	case "wal-loss":
		return e.walLoss(ctx, leader), true
	case "rollback":
		return e.rollback(ctx, leader), true
	case "foreign-cluster":
		return e.foreignCluster(ctx, leader), true
	}
	return "", false
}

func (e *engine) countOperator(f func(s *OperatorFaultStats)) {
	e.countCluster(func(s *ClusterFaultStats) { f(&s.Operator) })
}

// logSize is the size of node i's log now: what it logs from here on is
// read with logSince.
func (e *engine) logSize(i int) int64 {
	st, err := os.Stat(e.localNodes[i].Proc.LogPath)
	if err != nil {
		return 0
	}
	return st.Size()
}

// logSince is node i's log from offset off on.
func (e *engine) logSince(i int, off int64) string {
	f, err := os.Open(e.localNodes[i].Proc.LogPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return ""
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

// waitExit waits up to d for node i's process to exit, also once the run
// is ending: the fault is not over before it knows.
func (e *engine) waitExit(i int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for e.localNodes[i].Up() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// startExpectingExit starts node i, whose exit on its own is expected (it
// should refuse to start): such an exit is not a crash, and the node is
// not restarted.
func (e *engine) startExpectingExit(i int) {
	nd := e.localNodes[i]
	if err := nd.Proc.StartExpectingExit(); err != nil {
		e.logf("start %s: %v", nd.Name(), err)
	}
}

// walLoss deletes a member's raft log (wal/) while it is down and keeps its
// identity (member.json): the operator "fixed" a corrupt log. As in
// disk-loss, it is started with its usual command line when its vote
// decides: a minority lags, cut off while the leader and the member commit;
// the member goes down and loses its log; the leader's side goes down and
// the lagging nodes come back with the member, which with its identity and
// an empty log would vote for a lagging candidate. It must refuse to start
// ("the raft log does not match the member's identity"); as soon as it has
// (or after 4 election timeouts plus up to a TTL, when it has not) the
// leader's side starts again, and the member is recovered as documented.
func (e *engine) walLoss(ctx context.Context, leader int) string {
	lost, lagging, downSide := e.lossScene(ctx, leader)
	w := e.localNodes[lost]
	if err := w.Kill(context.Background()); err != nil {
		e.logf("wal-loss: kill %s: %v", w.Name(), err)
	}
	_, idErr := os.Stat(filepath.Join(w.Spec.DataDir, "member.json"))
	if err := os.RemoveAll(filepath.Join(w.Spec.DataDir, "wal")); err != nil {
		e.logf("wal-loss: delete %s/wal: %v", w.Spec.DataDir, err)
	}
	for _, j := range downSide {
		if err := e.localNodes[j].Kill(context.Background()); err != nil {
			e.logf("wal-loss: kill %s: %v", e.localNodes[j].Name(), err)
		}
	}
	e.netem.Heal()
	off := e.logSize(lost)
	e.startExpectingExit(lost)
	exited := e.waitExit(lost, e.uniform(4*e.electionTimeout(), 4*e.electionTimeout()+e.cfg.TTL))
	logged := e.logSince(lost, off)
	for _, j := range downSide {
		if err := e.localNodes[j].Start(context.Background()); err != nil {
			e.logf("wal-loss: restart %s: %v", e.localNodes[j].Name(), err)
		}
	}
	e.countOperator(func(s *OperatorFaultStats) { s.WalLosses++ })
	what := fmt.Sprintf("wal-loss: %s lost wal/ (member.json kept: %v) and was started with its usual command line while %s lagged and %s were down",
		w.Name(), idErr == nil, e.names(lagging), e.names(downSide))
	refused := exited && strings.Contains(logged, "the raft log does not match the member's identity")
	switch {
	case refused:
		e.op.expect(true, "wal-loss: %s refused to start: the raft log does not match the member's identity", w.Name())
		e.countOperator(func(s *OperatorFaultStats) { s.WalLossRefused++ })
		what += "; it refused to start"
	case exited:
		e.op.expect(false, "wal-loss: %s lost its raft log and exited without saying that the log does not match its identity: %s", w.Name(), lastLines(logged, 3))
		what += "; it exited for another reason"
	default:
		w.Proc.ExpectExit(false)
		e.op.expect(false, "wal-loss: %s lost its raft log (member.json kept) and started with its usual command line: it runs with an empty log and may vote", w.Name())
		what += "; it STARTED"
	}
	res := e.memberReAdd(ctx, lost)
	if !strings.Contains(res, "failed") {
		e.countOperator(func(s *OperatorFaultStats) { s.WalLossRecovered++ })
	}
	return what + "; recovery: " + res
}

// lastLines is the last n lines of s, on one line.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], " | ")
}

// nodeStats reads node i's /v1/stats.
func (e *engine) nodeStats(ctx context.Context, i int) (st struct {
	Term, CommitIndex, AppliedIndex uint64
}, err error) {
	var raw struct {
		Term         uint64 `json:"term"`
		CommitIndex  uint64 `json:"commitIndex"`
		AppliedIndex uint64 `json:"appliedIndex"`
	}
	err = getJSON(ctx, e.localNodes[i].Endpoint()+"/v1/stats", &raw)
	st.Term, st.CommitIndex, st.AppliedIndex = raw.Term, raw.CommitIndex, raw.AppliedIndex
	return st, err
}

// rollback starts a follower on an older copy of its own data directory:
// a cold copy taken while it is down (a VM snapshot, a file-level backup),
// put back after it went on acknowledging entries to the leader. The
// leader must refuse it ("peer runs on a rolled-back data directory",
// named under rolledBack in its GET /v1/role); it is then recovered as
// documented.
//
// What cannot be detected, and how the fault stays clear of it: a member
// knows only what was acknowledged to it, i.e. a rolled-back member is
// refused by the leaders it acknowledged entries to since the copy. If
// those are down, replaced or rolled back with it (a whole cluster put
// back from VM snapshots), or if the copy is newer than the last write of
// their record (every 100ms), nothing can tell the copy from a member that
// lagged; a rolled-back member and a lagging one can then elect a leader
// that lacks grants both never held (docs/clusters.md). So the fault keeps
// in the detectable domain: the copy is taken cold while the member is
// down; the member is started again and the fault waits until it has
// applied entries well past the leader's commit index at the time of the
// copy (so it acknowledged them to that leader, in its term) and past a
// flush of the record; the leader that saw those acknowledgements is
// neither killed nor cut off while the copy runs (no other fault runs
// meanwhile). Should the leader change anyway before the refusal is seen
// (an election on a starved machine), the fault is counted as
// undetectable and not checked.
func (e *engine) rollback(ctx context.Context, leader int) string {
	b := e.follower(leader)
	nd := e.localNodes[b]
	st0, err := e.nodeStats(ctx, leader)
	if err != nil {
		return "rollback skipped: " + err.Error()
	}
	copyDir, copied, err := e.coldCopy(ctx, leader, nd)
	if err != nil {
		return "rollback skipped: copy: " + err.Error()
	}
	defer os.RemoveAll(copyDir)
	// The member acknowledges entries past the copy to the leader.
	past := copied + 8
	if err := e.awaitApplied(ctx, b, past); err != nil {
		return "rollback skipped: " + err.Error()
	}
	sleepCtx(ctx, 3*acksFlushGrace)
	stNow, err := e.nodeStats(ctx, leader)
	if err != nil || stNow.Term != st0.Term || e.leader(ctx) != leader {
		e.countOperator(func(s *OperatorFaultStats) { s.RollbackLeaderMoved++ })
		return fmt.Sprintf("rollback skipped: the leader changed while %s acknowledged entries past its copy (the copy would not be detectable)", nd.Name())
	}
	e.restartOn(nd, copyDir)
	e.countOperator(func(s *OperatorFaultStats) { s.Rollbacks++ })
	what := fmt.Sprintf("rollback: %s started on a copy of its directory taken at about index %d, after it acknowledged index %d to leader %s",
		nd.Name(), copied, past, e.localNodes[leader].Name())
	why, moved := e.awaitRolledBack(ctx, leader, nd.Name(), st0.Term)
	switch {
	case why != "":
		e.op.expect(true, "rollback: leader %s refused %s: %s", e.localNodes[leader].Name(), nd.Name(), firstSentence(why))
		e.countOperator(func(s *OperatorFaultStats) { s.RollbackRefused++ })
		what += "; the leader refused it"
	case moved:
		e.countOperator(func(s *OperatorFaultStats) { s.RollbackLeaderMoved++ })
		what += "; the leader changed before it refused it (not checked)"
	default:
		e.op.expect(false, "rollback: %s runs on an older copy of its data directory (it acknowledged index %d, the copy ends near %d) and leader %s did not refuse it within 10s",
			nd.Name(), past, copied, e.localNodes[leader].Name())
		what += "; the leader did NOT refuse it"
	}
	res := e.memberReAdd(ctx, b)
	if !strings.Contains(res, "failed") {
		e.countOperator(func(s *OperatorFaultStats) { s.RollbackRecovered++ })
	}
	return what + "; recovery: " + res
}

// coldCopy copies nd's data directory while nd is down and starts it
// again. It returns the copy and the leader's commit index just after the
// copy, which bounds the copy's log: entries the member held when it went
// down were sent by the leader, which commits them with the other
// followers within milliseconds.
func (e *engine) coldCopy(ctx context.Context, leader int, nd *proc.LocalNode) (dir string, commit uint64, err error) {
	if err := nd.Kill(context.Background()); err != nil {
		e.logf("rollback: kill %s: %v", nd.Name(), err)
	}
	sleepCtx(ctx, 4*acksFlushGrace)
	st, err := e.nodeStats(ctx, leader)
	dir = nd.Spec.DataDir + ".rollback-copy"
	_ = os.RemoveAll(dir)
	if err == nil {
		err = os.CopyFS(dir, os.DirFS(nd.Spec.DataDir))
	}
	if serr := nd.Start(context.Background()); serr != nil {
		e.logf("rollback: restart %s: %v", nd.Name(), serr)
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		return "", 0, err
	}
	return dir, st.CommitIndex, nil
}

// awaitApplied waits up to 10 s for local node i to apply index.
func (e *engine) awaitApplied(ctx context.Context, i int, index uint64) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		if st, err := e.nodeStats(ctx, i); err == nil && st.AppliedIndex >= index {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s did not apply index %d within 10s", e.localNodes[i].Name(), index)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// restartOn starts nd on dir in place of its data directory.
func (e *engine) restartOn(nd *proc.LocalNode, dir string) {
	if err := nd.Kill(context.Background()); err != nil {
		e.logf("rollback: kill %s: %v", nd.Name(), err)
	}
	if err := os.RemoveAll(nd.Spec.DataDir); err != nil {
		e.logf("rollback: remove %s: %v", nd.Spec.DataDir, err)
	}
	if err := os.Rename(dir, nd.Spec.DataDir); err != nil {
		e.logf("rollback: put the copy back: %v", err)
	}
	if err := nd.Start(context.Background()); err != nil {
		e.logf("rollback: start %s on its copy: %v", nd.Name(), err)
	}
}

// awaitRolledBack waits up to 10 s for the leader to name member as
// rolled back in GET /v1/role, and returns its reason; or moved, if the
// leader left term first.
func (e *engine) awaitRolledBack(ctx context.Context, leader int, member string, term uint64) (why string, moved bool) {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && ctx.Err() == nil; time.Sleep(50 * time.Millisecond) {
		var r struct {
			RolledBack map[string]string `json:"rolledBack"`
			Term       uint64            `json:"term"`
			Role       string            `json:"role"`
		}
		if err := getJSON(ctx, e.localNodes[leader].Endpoint()+"/v1/role", &r); err != nil {
			continue
		}
		if why = r.RolledBack[member]; strings.Contains(why, "rolled-back data directory") {
			return why, false
		}
		if r.Term != term || r.Role != "leader" {
			return "", true
		}
	}
	return "", false
}

// acksFlushGrace is a margin past the interval at which members write what
// their peers acknowledged (100ms, server/internal/peers).
const acksFlushGrace = 150 * time.Millisecond

// firstSentence is s up to its first ". ".
func firstSentence(s string) string {
	if i := strings.Index(s, ". "); i >= 0 {
		return s[:i]
	}
	return s
}

// initialCluster is the cluster's membership as --initial-cluster says it:
// every node at its raft address as its peers dial it.
func (e *engine) initialCluster() string {
	var out []string
	for _, nd := range e.localNodes {
		out = append(out, nd.Name()+"="+nd.Spec.RaftAdvertise)
	}
	return strings.Join(out, ",")
}

// backup takes a backup of the cluster through node i: the file it was
// written to and its index.
func (e *engine) backup(ctx context.Context, i int, name string) (string, uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.localNodes[i].Endpoint()+"/v1/backup", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET /v1/backup: %s: %s", resp.Status, b)
	}
	if err != nil {
		return "", 0, err
	}
	var at uint64
	fmt.Sscan(resp.Header.Get("Fenced-Backup-Index"), &at)
	path := filepath.Join(e.cfg.OutputDir, name)
	return path, at, os.WriteFile(path, b, 0o600)
}

// restoreMember writes node i's data directory from backup, as fenced
// restore does, with the membership of the cluster and floor as start
// floor (the same for every member of one restore). It runs as a child
// process with the nodes' failpoints. The directory must not exist.
func (e *engine) restoreMember(i int, backup string, floor uint64) error {
	nd := e.localNodes[i]
	spec, _ := json.Marshal(proc.RestoreSpec{Backup: backup, DataDir: nd.Spec.DataDir, NodeID: nd.Name(),
		InitialCluster: e.initialCluster(), StartFloor: floor})
	argv := append(append([]string{}, e.cfg.Command...), proc.RoleRestore, "--spec", string(spec))
	out, err := runChild(argv, e.failpointEnv())
	if err != nil {
		return fmt.Errorf("restore %s from %s: %w: %s", nd.Name(), filepath.Base(backup), err, out)
	}
	return nil
}

// clusterIDOf reads the cluster ID in a data directory's member.json.
func clusterIDOf(dir string) string {
	var id struct {
		Cluster string `json:"clusterId"`
	}
	b, _ := os.ReadFile(filepath.Join(dir, "member.json"))
	_ = json.Unmarshal(b, &id)
	return id.Cluster
}

// awaitRefusals waits up to d until node j's log from offs[j] on says that
// it refused a peer of another cluster, with the ID want, for each j in
// who, and returns the nodes that did not.
func (e *engine) awaitRefusals(ctx context.Context, who []int, offs []int64, want string, d time.Duration) []int {
	deadline := time.Now().Add(d)
	for {
		var missing []int
		for _, j := range who {
			l := e.logSince(j, offs[j])
			if !refusedCluster(l, want) {
				missing = append(missing, j)
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			return missing
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// refusedCluster reports whether log has a line that refuses a peer of
// another cluster and names the cluster ID want ("": any).
func refusedCluster(log, want string) bool {
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "peer belongs to another cluster") && strings.Contains(l, want) {
			return true
		}
	}
	return false
}

// logOffsets are every node's log sizes now.
func (e *engine) logOffsets() []int64 {
	offs := make([]int64, len(e.localNodes))
	for j := range e.localNodes {
		offs[j] = e.logSize(j)
	}
	return offs
}

// foreignCluster shows the cluster a node of another cluster, in turns:
//
//   - a follower is restarted on a data directory restored from a backup
//     of this very cluster (fenced restore with this membership: a new
//     cluster, with a first term above any this one reached), its own
//     directory set aside. It campaigns, and the leader sends it
//     heartbeats: every member must refuse it, and it them. Then it is
//     started on its own directory again, which it never left.
//   - a foreign cluster of one (a node "foreign" on its own directory) is
//     asked to add each member of this cluster (fencectl member add
//     against the wrong endpoint), and this cluster to add it: each add
//     must fail, and every member must refuse the foreign node's
//     connection.
//
// Were a member to accept the first, the restored member's high term would
// depose the leader and its older state replace the cluster's.
func (e *engine) foreignCluster(ctx context.Context, leader int) string {
	e.op.mu.Lock()
	turn := e.op.foreignTurn
	e.op.foreignTurn++
	e.op.mu.Unlock()
	if turn%2 == 1 {
		return e.foreignNode(ctx, leader)
	}
	x := e.follower(leader)
	nd := e.localNodes[x]
	backup, _, err := e.backup(ctx, leader, fmt.Sprintf("foreign-%d.backup", turn))
	if err != nil {
		return "foreign-cluster skipped: backup: " + err.Error()
	}
	defer os.Remove(backup)
	if err := nd.Kill(context.Background()); err != nil {
		e.logf("foreign-cluster: kill %s: %v", nd.Name(), err)
	}
	own := nd.Spec.DataDir + ".own"
	if err := os.Rename(nd.Spec.DataDir, own); err != nil {
		_ = nd.Start(context.Background())
		return "foreign-cluster skipped: " + err.Error()
	}
	putBack := func() {
		if err := nd.Kill(context.Background()); err != nil {
			e.logf("foreign-cluster: kill %s: %v", nd.Name(), err)
		}
		_ = os.RemoveAll(nd.Spec.DataDir)
		if err := os.Rename(own, nd.Spec.DataDir); err != nil {
			e.logf("foreign-cluster: put %s's own directory back: %v", nd.Name(), err)
		}
		if err := nd.Start(context.Background()); err != nil {
			e.logf("foreign-cluster: restart %s: %v", nd.Name(), err)
		}
	}
	if err := e.restoreMember(x, backup, uint64(time.Now().UnixMicro())); err != nil {
		putBack()
		return "foreign-cluster skipped: " + err.Error()
	}
	foreign := clusterIDOf(nd.Spec.DataDir)
	offs := e.logOffsets()
	if err := nd.Start(context.Background()); err != nil {
		e.logf("foreign-cluster: start %s on a restored directory: %v", nd.Name(), err)
	}
	var others []int
	for j := range e.localNodes {
		if j != x {
			others = append(others, j)
		}
	}
	// The restored member waits an election timeout before it campaigns.
	missing := e.awaitRefusals(ctx, others, offs, foreign, 4*e.electionTimeout()+5*time.Second)
	selfRefused := len(e.awaitRefusals(ctx, []int{x}, offs, "", time.Second)) == 0
	e.countOperator(func(s *OperatorFaultStats) {
		s.ForeignClusters++
		s.ForeignRestored++
		s.ForeignRefusals += len(others) - len(missing)
	})
	what := fmt.Sprintf("foreign-cluster: %s restarted on a directory restored from a backup of this cluster (cluster ID %.8s…)", nd.Name(), foreign)
	for _, j := range others {
		if slices.Contains(missing, j) {
			e.op.expect(false, "foreign-cluster: %s ran on a directory restored from a backup (another cluster, %s) and %s did not refuse it", nd.Name(), foreign, e.localNodes[j].Name())
		} else {
			e.op.expect(true, "foreign-cluster: %s refused %s restored from a backup (another cluster)", e.localNodes[j].Name(), nd.Name())
		}
	}
	if len(missing) == 0 {
		what += fmt.Sprintf("; refused by every other member (it refused them too: %v)", selfRefused)
	} else {
		what += "; NOT refused by " + e.names(missing)
	}
	putBack()
	return what + "; started again on its own directory"
}

// foreignNode starts a foreign cluster of one and points it at this
// cluster's members, and this cluster at it (member add both ways).
func (e *engine) foreignNode(ctx context.Context, leader int) string {
	listen, err := freeAddr()
	raftAddr, err2 := freeAddr()
	if err != nil || err2 != nil {
		return fmt.Sprintf("foreign-cluster skipped: %v %v", err, err2)
	}
	dir := filepath.Join(e.cfg.OutputDir, "foreign")
	_ = os.RemoveAll(dir)
	defer os.RemoveAll(dir)
	spec := proc.NodeSpec{NodeID: "foreign", DataDir: dir, Listen: listen, RaftListen: raftAddr,
		MinTTL: e.cfg.NodeMinTTL, HeartbeatTimeout: e.cfg.NodeHeartbeatTimeout}
	f, err := proc.NewLocalNode(e.cfg.Command, spec, filepath.Join(e.cfg.OutputDir, "foreign.log"))
	if err != nil {
		return "foreign-cluster skipped: " + err.Error()
	}
	f.Proc.Env = e.failpointEnv()
	f.Proc.OnExit = func(err error) { e.crashedf(f.Proc, err) }
	if err := f.Start(context.Background()); err != nil {
		return "foreign-cluster skipped: " + err.Error()
	}
	defer f.Stop(10 * time.Second)
	var r struct {
		ClusterID string `json:"clusterId"`
		Role      string `json:"role"`
		Ready     bool   `json:"ready"`
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if err := getJSON(ctx, f.Endpoint()+"/v1/role", &r); err == nil && r.Ready && r.ClusterID != "" {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Sprintf("foreign-cluster skipped: the foreign node did not lead within 20s: %+v", r)
		}
	}
	offs := e.logOffsets()
	var all []int
	var adds []string
	for j, nd := range e.localNodes {
		all = append(all, j)
		// fencectl member add on the foreign cluster, naming a member of
		// this one.
		err := e.addMember(ctx, f.Endpoint(), nd.Name(), nd.Spec.RaftAdvertise)
		adds = append(adds, fmt.Sprintf("foreign adds %s: %s", nd.Name(), addOutcome(err)))
		e.op.expect(err != nil && strings.Contains(err.Error(), "another cluster"),
			"foreign-cluster: the foreign cluster of one was asked to add %s: %s", nd.Name(), addOutcome(err))
	}
	// fencectl member add on this cluster, naming the foreign node.
	err = e.addMember(ctx, e.localNodes[leader].Endpoint(), "foreign", raftAddr)
	adds = append(adds, "this cluster adds foreign: "+addOutcome(err))
	e.op.expect(err != nil && strings.Contains(err.Error(), "another cluster"),
		"foreign-cluster: this cluster was asked to add the foreign node: %s", addOutcome(err))
	missing := e.awaitRefusals(ctx, all, offs, r.ClusterID, 5*time.Second)
	for _, j := range all {
		e.op.expectSeen(!slices.Contains(missing, j), "foreign-cluster: %s refused the foreign node (another cluster) in its log", e.localNodes[j].Name())
	}
	e.countOperator(func(s *OperatorFaultStats) {
		s.ForeignClusters++
		s.ForeignNodes++
		s.ForeignRefusals += len(all) - len(missing)
	})
	what := fmt.Sprintf("foreign-cluster: a foreign cluster of one (%.8s…) pointed at this cluster: %s", r.ClusterID, strings.Join(adds, "; "))
	if len(missing) > 0 {
		what += "; NOT refused in the logs of " + e.names(missing)
		if err == nil {
			// It was added: take it out again, so that the cluster can be
			// whole.
			_ = e.removeMember(ctx, e.localNodes[leader].Endpoint(), "foreign")
		}
	}
	return what
}

func addOutcome(err error) string {
	if err == nil {
		return "ADDED"
	}
	if strings.Contains(err.Error(), "peer belongs to another cluster") {
		return "refused (another cluster)"
	}
	msg := err.Error()
	return "failed: " + msg[:min(len(msg), 200)]
}

// freeAddr is a free loopback address for a node that is not a member.
func freeAddr() (string, error) { return testutil.FreeAddr() }

// addMember asks the cluster at endpoint to add node id at addr (fencectl
// member add), retrying while it is unavailable.
func (e *engine) addMember(ctx context.Context, endpoint, id, addr string) error {
	return clusterCall(ctx, endpoint, func(ctx context.Context, c fencedv1connect.ClusterServiceClient) error {
		_, err := c.AddMember(ctx, connect.NewRequest(&fencedv1.AddMemberRequest{Id: id, Address: addr}))
		return err
	})
}

// removeMember asks the cluster at endpoint to remove node id.
func (e *engine) removeMember(ctx context.Context, endpoint, id string) error {
	return clusterCall(ctx, endpoint, func(ctx context.Context, c fencedv1connect.ClusterServiceClient) error {
		_, err := c.RemoveMember(ctx, connect.NewRequest(&fencedv1.RemoveMemberRequest{Id: id}))
		return err
	})
}

func clusterCall(ctx context.Context, endpoint string, f func(context.Context, fencedv1connect.ClusterServiceClient) error) error {
	c := fencedv1connect.NewClusterServiceClient(http.DefaultClient, endpoint)
	deadline := time.Now().Add(10 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := f(cctx, c)
		cancel()
		if err == nil || connect.CodeOf(err) != connect.CodeUnavailable || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// runChild runs argv to its end with env added, and returns its output.
func runChild(argv, env []string) (string, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// operatorChecks runs the end-of-run restore phase if asked for, and
// returns the operator checkers' results.
func (e *engine) operatorChecks() []check.Result {
	kinds := e.cfg.ClusterFaults
	if len(kinds) == 0 {
		kinds = defaultClusterFaultKinds
	}
	asked := slices.ContainsFunc(kinds, func(k string) bool { return slices.Contains(operatorFaultKinds, k) })
	if !asked {
		return nil
	}
	var out []check.Result
	if slices.Contains(kinds, "cluster-restore") {
		r := check.Result{Name: NameRestoreTokens}
		wctx, cancel := context.WithTimeout(context.Background(), recoveryTimeout)
		whole := e.awaitCluster(wctx) == nil
		cancel()
		if whole {
			e.restorePhase(&r)
		} else {
			r.Skipped = "the cluster was not whole at the end of the run"
		}
		out = append(out, r)
	}
	o := &e.op
	o.mu.Lock()
	defer o.mu.Unlock()
	refused := check.Result{Name: NameOperatorRefused, Checked: o.checked}
	for _, m := range o.missed {
		refused.AddViolationAt(m.at, "%s", m.what)
	}
	e.mu.Lock()
	s := e.stats.Cluster.Operator
	e.mu.Unlock()
	refused.Note = fmt.Sprintf("%d of %d refusals seen: wal-loss %d/%d refused to start; rollback %d/%d named rolledBack by the leader (%d skipped or not checked: the leader changed); foreign-cluster %d faults, %d member refusals",
		o.checked-len(o.missed), o.checked, s.WalLossRefused, s.WalLosses, s.RollbackRefused, s.Rollbacks, s.RollbackLeaderMoved,
		s.ForeignClusters, s.ForeignRefusals)
	if s.ClusterRestores > 0 {
		refused.Note += fmt.Sprintf("; cluster-restore %d refusals", s.RestoreRefusals)
	}
	if o.checked == 0 {
		refused.Skipped = "no operator fault ran"
	}
	return append([]check.Result{refused}, out...)
}

// writeOperatorStats writes the operator faults' counts, if any ran.
func writeOperatorStats(w io.Writer, s OperatorFaultStats) {
	if s == (OperatorFaultStats{}) {
		return
	}
	fmt.Fprintf(w, "    operator mistakes: wal lost (member.json kept) %d (refused to start %d, recovered %d); rolled back to an older copy %d (refused by the leader %d, leader changed %d, recovered %d); another cluster's node shown %d (restored member %d, foreign node %d; member refusals %d); cluster restores at the end %d (refusals %d)\n",
		s.WalLosses, s.WalLossRefused, s.WalLossRecovered, s.Rollbacks, s.RollbackRefused, s.RollbackLeaderMoved, s.RollbackRecovered,
		s.ForeignClusters, s.ForeignRestored, s.ForeignNodes, s.ForeignRefusals, s.ClusterRestores, s.RestoreRefusals)
}
