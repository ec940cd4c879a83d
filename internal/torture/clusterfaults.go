package torture

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"connectrpc.com/connect"

	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/api/fenced/v1/fencedv1connect"
	"github.com/fencedio/fenced/internal/torture/netfault"
	"github.com/fencedio/fenced/internal/torture/proc"
	"github.com/fencedio/fenced/internal/torture/worker"
)

// clusterFaultWeight is how many times a kind comes in each round; the
// others come once. These two open windows that no other fault opens and
// that a bug needs to be in at the right moment: a leader whose main loop
// hangs while its API serves, and the same node leading again within
// about a TTL. Twice a round, a 20-40 s mutant run meets each several
// times.
var clusterFaultWeight = map[string]int{"leader-disk-stall": 2, "leader-reelect": 2}

// clusterFaultDeck is one round of kinds, each as often as its weight.
// Without Config.ClusterFaults it is the default kinds, plus
// leader-disk-stall when the nodes carry the failpoints (a run with
// mutants or power losses), since only such nodes can stall.
func (e *engine) clusterFaultDeck() []string {
	kinds := slices.Clone(defaultClusterFaultKinds)
	if len(e.cfg.ClusterFaults) > 0 {
		kinds = e.cfg.ClusterFaults
	} else if e.cfg.nodeSideAcks() {
		kinds = append(kinds, "leader-disk-stall")
	}
	kinds = runKinds(kinds) // end-of-run kinds are not dealt (operatorfaults.go)
	var deck []string
	for _, k := range kinds {
		for range max(clusterFaultWeight[k], 1) {
			deck = append(deck, k)
		}
	}
	return deck
}

// clusterFaults injects one cluster fault after another until ctx ends.
// The kinds come in shuffled rounds (clusterFaultDeck), so that a short
// run has each of them once the first round is through. After each fault
// has healed, the cluster must be whole again within recoveryTimeout (else
// a violation).
func (e *engine) clusterFaults(ctx context.Context) {
	iv := e.cfg.ClusterFaultInterval
	if len(e.clusterFaultDeck()) == 0 {
		<-ctx.Done() // only end-of-run kinds (operatorfaults.go)
		return
	}
	for {
		deck := e.clusterFaultDeck()
		e.rngMu.Lock()
		e.rng.Shuffle(len(deck), func(i, j int) { deck[i], deck[j] = deck[j], deck[i] })
		e.rngMu.Unlock()
		for _, kind := range deck {
			if !sleepCtx(ctx, e.uniform(iv/2, iv*3/2)) {
				return
			}
			start := time.Now()
			what := e.clusterFault(ctx, kind)
			rctx, cancel := context.WithTimeout(context.Background(), recoveryTimeout)
			err := e.awaitCluster(rctx)
			cancel()
			e.mu.Lock()
			if err != nil {
				e.recoveryProblems = append(e.recoveryProblems, fmt.Sprintf("after %s: the cluster was not whole within %v: %v", what, recoveryTimeout, err))
			} else {
				e.stats.Cluster.Recoveries++
			}
			e.mu.Unlock()
			e.logf("%s; whole again after %v", what, time.Since(start).Round(time.Millisecond))
		}
	}
}

// clusterFault injects one fault of the kind and heals it; it returns what
// it did, in words.
func (e *engine) clusterFault(ctx context.Context, kind string) string {
	leader := e.waitLeader(ctx, 5*time.Second)
	if leader < 0 && kind != "follower-kill" && kind != "slow-links" && kind != "rolling-restart" {
		e.countCluster(func(s *ClusterFaultStats) { s.NoLeader++ })
		return kind + " skipped: no leader"
	}
	switch kind {
	case "leader-kill":
		return e.killFault(ctx, kind, leader)
	case "follower-kill":
		return e.killFault(ctx, kind, e.follower(leader))
	case "leader-pause":
		return e.pauseLeader(ctx, leader)
	case "leader-reelect":
		return e.reelectLeader(ctx, leader)
	case "leader-isolation":
		return e.isolate(ctx, kind, leader)
	case "follower-isolation":
		return e.isolate(ctx, kind, e.follower(leader))
	case "moving-split":
		return e.movingSplit(ctx)
	case "slow-links":
		return e.slowLinks(ctx)
	case "rolling-restart":
		return e.rollingRestart()
	case "member-re-add":
		return e.memberReAdd(ctx, e.follower(leader))
	case "disk-loss":
		return e.diskLoss(ctx, leader)
	case "leader-disk-stall":
		return e.stallLeader(ctx, leader)
	}
	if what, ok := e.operatorFault(ctx, kind, leader); ok {
		return what
	}
	return "unknown fault " + kind
}

// countCluster updates the cluster fault counts.
func (e *engine) countCluster(f func(s *ClusterFaultStats)) {
	e.mu.Lock()
	f(&e.stats.Cluster)
	e.mu.Unlock()
}

// follower picks a node other than leader (any node if there is none).
func (e *engine) follower(leader int) int {
	n := len(e.localNodes)
	if leader < 0 {
		return e.intN(n)
	}
	return (leader + 1 + e.intN(n-1)) % n
}

// linkFault picks how a partition cuts its links, and for how long a
// fault holds.
func (e *engine) linkFault() (mode netfault.LinkMode, name string, hold time.Duration) {
	mode, name = netfault.LinkDrop, "dropped"
	if e.chance(0.5) {
		mode, name = netfault.LinkBlackHole, "black-holed"
	}
	return mode, name, e.uniform(3*e.electionTimeout(), 3*e.electionTimeout()+3*time.Second)
}

// shortHold is how long a fault that must end before the TTL lasts: longer
// than an election takes (2.5 election timeouts) and shorter than the TTL
// (0.9 TTL). ok is false when the TTL leaves no such room.
func (e *engine) shortHold() (d time.Duration, ok bool) {
	lo, hi := 5*e.electionTimeout()/2, 9*e.cfg.TTL/10
	if lo >= hi {
		return 0, false
	}
	return e.uniform(lo, hi), true
}

// killFault kills node i (kind leader-kill or follower-kill); a leader kill
// in a five-node cluster takes a follower down with it half the time.
func (e *engine) killFault(ctx context.Context, kind string, i int) string {
	aimed := ""
	var ackAt time.Time
	if kind == "leader-kill" && e.acks != nil && e.chance(e.cfg.AfterAckShare) {
		if ack, ok := e.acks.await(ctx, isLogAck); ok {
			ackAt = ack.at
			aimed = fmt.Sprintf(" %v after %s acknowledged an %s", time.Since(ack.at).Round(time.Microsecond), e.localNodes[ack.node].Name(), ack.kind)
			e.countCluster(func(s *ClusterFaultStats) { s.AimedLeaderKills++ })
		}
	}
	if kind == "leader-kill" && len(e.localNodes) >= 5 && e.chance(0.5) {
		j := e.follower(i)
		downs := make(chan time.Duration, 1)
		go func() { downs <- e.crash(ctx, e.localNodes[j], true, time.Time{}).down }()
		down := e.crash(ctx, e.localNodes[i], true, time.Time{}).down
		other := <-downs
		e.countCluster(func(s *ClusterFaultStats) { s.LeaderKills++; s.TwoDown++ })
		return fmt.Sprintf("%s: kill -9 %s (down %v) and follower %s (down %v) at once", kind,
			e.localNodes[i].Name(), down.Round(time.Millisecond), e.localNodes[j].Name(), other.Round(time.Millisecond))
	}
	down := e.crash(ctx, e.localNodes[i], aimed == "", ackAt).down
	e.countCluster(func(s *ClusterFaultStats) {
		if kind == "leader-kill" {
			s.LeaderKills++
		} else {
			s.FollowerKills++
		}
	})
	return fmt.Sprintf("%s: kill -9 %s%s, down %v", kind, e.localNodes[i].Name(), aimed, down.Round(time.Millisecond))
}

// pauseLeader freezes the leader past an election but not past the TTL
// (shortHold), so that it wakes deposed with live deadlines, and half the
// time freezes every worker that holds a lease as it wakes, so that a
// renewal the deposed leader acknowledges then is its holder's last.
func (e *engine) pauseLeader(ctx context.Context, leader int) string {
	d, ok := e.shortHold()
	if !ok {
		d = e.uniform(3*e.electionTimeout(), 6*e.electionTimeout())
	}
	p := e.localNodes[leader].Proc
	if err := p.Signal(proc.SigStop); err != nil {
		return "leader-pause failed: " + err.Error()
	}
	sleepCtx(ctx, d)
	var renewed int64
	if e.acks != nil {
		renewed = e.acks.renewals[leader].Load()
	}
	_ = p.Signal(proc.SigCont)
	// A renewal the woken leader acknowledges before it finds out that it
	// was deposed is what the holders are frozen for; with the nodes'
	// reports, they are frozen as soon as the woken node answers one
	// (the reports do not tell its own answers from forwarded ones).
	woke, late := time.Now(), int64(0)
	for e.acks != nil && late == 0 && time.Since(woke) < e.electionTimeout()/4 {
		time.Sleep(time.Millisecond)
		late = e.acks.renewals[leader].Load() - renewed
	}
	frozen := ""
	if late > 0 {
		frozen = fmt.Sprintf(", which answered a renewal (itself or forwarded) %v after waking", time.Since(woke).Round(time.Millisecond))
		e.countCluster(func(s *ClusterFaultStats) { s.RenewalsOnWaking++ })
	}
	if late > 0 || e.chance(0.5) {
		if e.acks == nil {
			time.Sleep(e.uniform(0, e.electionTimeout()/4))
		}
		frozen += fmt.Sprintf(", then froze the %d workers holding a lease", e.freezeHolders())
		e.countCluster(func(s *ClusterFaultStats) { s.HoldersFrozen++ })
	}
	e.countCluster(func(s *ClusterFaultStats) { s.LeaderPauses++ })
	return fmt.Sprintf("leader-pause: SIGSTOP %s for %v%s", p.Name, d.Round(time.Millisecond), frozen)
}

// freezeHolders freezes every worker that holds a lease and is not frozen
// already, past its TTL (PauseMin..PauseMax), and returns how many.
func (e *engine) freezeHolders() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.faultCtx == nil || e.faultsOff {
		return 0
	}
	n := 0
	for _, ws := range e.workers {
		if ws.state == worker.EventHolding && !ws.paused {
			n++
			e.faults.Add(1)
			go func(ws *workerState, lease int) { defer e.faults.Done(); e.pause(ws, lease, 0) }(ws, ws.lease)
		}
	}
	return n
}

// lossScene sets the stage for a member to lose its disk when its vote
// decides: it picks that member (a follower), a lagging minority and the
// leader's side, which will go down, then cuts the lagging nodes off while
// the leader and the member commit for 0.5-1 TTL.
func (e *engine) lossScene(ctx context.Context, leader int) (member int, lagging, downSide []int) {
	n := len(e.localNodes)
	var followers []int
	for _, j := range e.perm(n) {
		if j != leader {
			followers = append(followers, j)
		}
	}
	member = followers[0]
	lagging = followers[1 : 1+(n-1)/2]
	downSide = append([]int{leader}, followers[1+(n-1)/2:]...)
	var rest []int
	for j := range n {
		if !slices.Contains(lagging, j) {
			rest = append(rest, j)
		}
	}
	e.netem.Partition(netfault.LinkDrop, lagging, rest)
	sleepCtx(ctx, e.uniform(e.cfg.TTL/2, e.cfg.TTL))
	return member, lagging, downSide
}

// diskLoss deletes the data directory of a member while it is down and
// starts it again with its usual command line, when its vote decides: a
// minority lags, cut off while the leader and the member commit; the
// member goes down and loses its disk; the leader's side goes down and the
// lagging nodes come back with the wiped member, which only a member that
// forgot could elect one of. After a while the leader's side comes back.
// A wiped member that is then not whole with the cluster again within 15s
// (it refused, as it must) is recovered as documented: member remove,
// wipe, start with --join, member add. One that rejoined on its own is a
// violation (NameWipedRefuses).
func (e *engine) diskLoss(ctx context.Context, leader int) string {
	wiped, lagging, downSide := e.lossScene(ctx, leader)
	w := e.localNodes[wiped]
	if err := w.Kill(context.Background()); err != nil {
		e.logf("disk-loss: kill %s: %v", w.Name(), err)
	}
	if err := os.RemoveAll(w.Spec.DataDir); err != nil {
		e.logf("disk-loss: wipe %s: %v", w.Spec.DataDir, err)
	}
	for _, j := range downSide {
		if err := e.localNodes[j].Kill(context.Background()); err != nil {
			e.logf("disk-loss: kill %s: %v", e.localNodes[j].Name(), err)
		}
	}
	e.netem.Heal()
	// The wiped member may refuse to start at all: that exit is expected.
	if err := w.Start(context.Background()); err != nil {
		e.logf("disk-loss: start %s: %v", w.Name(), err)
	}
	w.Proc.ExpectExit(true)
	sleepCtx(ctx, e.uniform(4*e.electionTimeout(), 4*e.electionTimeout()+e.cfg.TTL))
	for _, j := range downSide {
		if err := e.localNodes[j].Start(context.Background()); err != nil {
			e.logf("disk-loss: restart %s: %v", e.localNodes[j].Name(), err)
		}
	}
	what := fmt.Sprintf("disk-loss: %s wiped and started with its usual command line while %s lagged and %s were down",
		w.Name(), e.names(lagging), e.names(downSide))
	e.countCluster(func(s *ClusterFaultStats) { s.DiskLosses++ })
	rctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	err := e.awaitCluster(rctx)
	cancel()
	if err == nil && w.Up() {
		w.Proc.ExpectExit(false)
		e.mu.Lock()
		e.rejoinedWiped = append(e.rejoinedWiped, timedNote{time.Now().UnixNano(), fmt.Sprintf("%s lost its data directory, was started with its usual command line and is a voter again without having been removed and added back", w.Name())})
		e.mu.Unlock()
		return what + "; it rejoined on its own"
	}
	e.countCluster(func(s *ClusterFaultStats) { s.WipedRefused++ })
	res := e.memberReAdd(ctx, wiped)
	if !strings.Contains(res, "failed") {
		e.countCluster(func(s *ClusterFaultStats) { s.WipedRecovered++ })
	}
	return fmt.Sprintf("%s; it did not rejoin (%v); recovery: %s", what, err, res)
}

// stallPath is the file whose existence stalls node's raft log writes
// (failpoint.LogStallEnvVar).
func (e *engine) stallPath(node string) string {
	return filepath.Join(e.cfg.OutputDir, node+".log-stall")
}

// stallLeader hangs the leader's raft log writes and, once one hangs (its
// main loop is then stuck in the write, and checks neither its leader lease
// nor the terms of others), cuts it off from the others past an election
// and a TTL, in which its API goes on serving; then the write goes through
// and the links heal. A node that renews on its own state without a quorum
// contact acknowledges renewals its successor never sees, and expires them
// when it takes over. Needs nodes built with the failpoints: without them
// no write hangs and the fault is skipped.
func (e *engine) stallLeader(ctx context.Context, leader int) string {
	nd := e.localNodes[leader]
	path := e.stallPath(nd.Name())
	_ = os.Remove(path + ".caught")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		return "leader-disk-stall failed: " + err.Error()
	}
	defer os.Remove(path)
	caught := time.Now()
	for {
		if _, err := os.Stat(path + ".caught"); err == nil {
			break
		}
		if time.Since(caught) > 2*e.cfg.TTL || ctx.Err() != nil {
			return fmt.Sprintf("leader-disk-stall skipped: no log write of %s hung within %v (a node built without the fenced_failpoints tag?)", nd.Name(), 2*e.cfg.TTL)
		}
		time.Sleep(time.Millisecond)
	}
	caughtAfter := time.Since(caught)
	mode, modeName, _ := e.linkFault()
	var rest []int
	for j := range len(e.localNodes) {
		if j != leader {
			rest = append(rest, j)
		}
	}
	hold := 3*e.electionTimeout() + e.cfg.TTL + e.uniform(0, e.cfg.TTL/2)
	e.netem.Partition(mode, []int{leader}, rest)
	sleepCtx(ctx, hold)
	_ = os.Remove(path)
	e.netem.Heal()
	e.countCluster(func(s *ClusterFaultStats) { s.LeaderDiskStalls++ })
	return fmt.Sprintf("leader-disk-stall: a log write of %s hung (after %v), and it was cut off (links %s) for %v",
		nd.Name(), caughtAfter.Round(time.Millisecond), modeName, hold.Round(time.Millisecond))
}

// isolate cuts node i off from all the others for a while.
func (e *engine) isolate(ctx context.Context, kind string, i int) string {
	mode, modeName, hold := e.linkFault()
	var rest []int
	for j := range len(e.localNodes) {
		if j != i {
			rest = append(rest, j)
		}
	}
	if d, ok := e.shortHold(); ok {
		hold = d
	}
	e.netem.Partition(mode, []int{i}, rest)
	sleepCtx(ctx, hold)
	e.netem.Heal()
	e.countCluster(func(s *ClusterFaultStats) {
		if kind == "leader-isolation" {
			s.LeaderIsolations++
		} else {
			s.FollowerIsolations++
		}
	})
	return fmt.Sprintf("%s: %s cut off (links %s) for %v", kind, e.localNodes[i].Name(), modeName, hold.Round(time.Millisecond))
}

// movingSplit splits the cluster into a minority and a majority two or
// three times, with different sides, then heals.
func (e *engine) movingSplit(ctx context.Context) string {
	n := len(e.localNodes)
	mode, modeName, _ := e.linkFault()
	steps := 2 + e.intN(2)
	var desc []string
	for range steps {
		perm := e.perm(n)
		size := 1 + e.intN((n-1)/2) // a minority
		minority, majority := slices.Clone(perm[:size]), slices.Clone(perm[size:])
		e.netem.Partition(mode, minority, majority)
		desc = append(desc, e.names(minority)+"|"+e.names(majority))
		e.countCluster(func(s *ClusterFaultStats) { s.SplitSteps++ })
		if !sleepCtx(ctx, e.uniform(2*e.electionTimeout(), 2*e.electionTimeout()+2*time.Second)) {
			break
		}
	}
	e.netem.Heal()
	e.countCluster(func(s *ClusterFaultStats) { s.MovingSplits++ })
	return fmt.Sprintf("moving-split (links %s): %s", modeName, strings.Join(desc, " -> "))
}

// slowLinks delays random directed links for a while.
func (e *engine) slowLinks(ctx context.Context) string {
	n := len(e.localNodes)
	_, _, hold := e.linkFault()
	links := 1 + e.intN(n*(n-1))
	for range links {
		a := e.intN(n)
		b := (a + 1 + e.intN(n-1)) % n
		e.netem.SetDelay(a, b, e.uniform(20*time.Millisecond, 150*time.Millisecond))
	}
	sleepCtx(ctx, hold)
	e.netem.Heal()
	e.countCluster(func(s *ClusterFaultStats) { s.SlowLinks++ })
	return fmt.Sprintf("slow-links: %d directed links delayed for %v", links, hold.Round(time.Millisecond))
}

// rollingRestart restarts every node in turn, waiting each time until the
// cluster is whole.
func (e *engine) rollingRestart() string {
	for _, i := range e.perm(len(e.localNodes)) {
		nd := e.localNodes[i]
		if nd.Stop(10 * time.Second) {
			e.logf("rolling restart: %s did not stop within 10s and was killed", nd.Name())
		} else {
			e.checkExit(nd.Proc)
		}
		if err := nd.Start(context.Background()); err != nil {
			e.logf("restart %s: %v", nd.Name(), err)
		}
		e.countCluster(func(s *ClusterFaultStats) { s.NodeRestarts++ })
		rctx, cancel := context.WithTimeout(context.Background(), recoveryTimeout)
		err := e.awaitCluster(rctx)
		cancel()
		if err != nil {
			return fmt.Sprintf("rolling-restart stopped after %s: %v", nd.Name(), err)
		}
	}
	e.countCluster(func(s *ClusterFaultStats) { s.RollingRestarts++ })
	return "rolling-restart of every node"
}

// memberReAdd kills follower i, removes it from the configuration through
// ClusterService, wipes its data and starts it empty with --join, then
// adds it back (fencectl member remove / add).
func (e *engine) memberReAdd(ctx context.Context, i int) string {
	nd := e.localNodes[i]
	if err := nd.Kill(context.Background()); err != nil {
		e.logf("member-re-add: kill %s: %v", nd.Name(), err)
	}
	var others []string
	for j, o := range e.localNodes {
		if j != i {
			others = append(others, o.Endpoint())
		}
	}
	call := func(what string, f func(context.Context, fencedv1connect.ClusterServiceClient) error) error {
		deadline := time.Now().Add(20 * time.Second)
		for k := 0; ; k++ {
			c := fencedv1connect.NewClusterServiceClient(http.DefaultClient, others[k%len(others)])
			cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := f(cctx, c)
			cancel()
			if err == nil {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s: %w", what, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	err := call("remove", func(ctx context.Context, c fencedv1connect.ClusterServiceClient) error {
		_, err := c.RemoveMember(ctx, connect.NewRequest(&fencedv1.RemoveMemberRequest{Id: nd.Name()}))
		if connect.CodeOf(err) == connect.CodeNotFound {
			return nil // an earlier attempt went through
		}
		return err
	})
	if err != nil {
		e.mu.Lock()
		e.recoveryProblems = append(e.recoveryProblems, fmt.Sprintf("member-re-add: %s: %v", nd.Name(), err))
		e.mu.Unlock()
	}
	if err := os.RemoveAll(nd.Spec.DataDir); err != nil {
		e.logf("member-re-add: wipe %s: %v", nd.Spec.DataDir, err)
	}
	spec := nd.Spec
	spec.InitialCluster, spec.Join = "", true
	nd.Respec(e.cfg.Command, spec)
	if err := nd.Start(context.Background()); err != nil {
		e.logf("restart %s: %v", nd.Name(), err)
	}
	err = call("add", func(ctx context.Context, c fencedv1connect.ClusterServiceClient) error {
		_, err := c.AddMember(ctx, connect.NewRequest(&fencedv1.AddMemberRequest{Id: nd.Name(), Address: spec.RaftAdvertise}))
		return err
	})
	if err != nil {
		e.mu.Lock()
		e.recoveryProblems = append(e.recoveryProblems, fmt.Sprintf("member-re-add: %s: %v", nd.Name(), err))
		e.mu.Unlock()
		return fmt.Sprintf("member-re-add of %s failed: %v", nd.Name(), err)
	}
	e.mu.Lock()
	e.stats.Cluster.MemberReAdds++
	e.mu.Unlock()
	return fmt.Sprintf("member-re-add: %s killed, removed, wiped and added back empty", nd.Name())
}

func (e *engine) perm(n int) []int {
	e.rngMu.Lock()
	defer e.rngMu.Unlock()
	return e.rng.Perm(n)
}

func (e *engine) names(idx []int) string {
	var s []string
	for _, i := range idx {
		s = append(s, e.localNodes[i].Name())
	}
	sort.Strings(s)
	return strings.Join(s, ",")
}
