package torture

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"connectrpc.com/connect"

	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/api/fenced/v1/fencedv1connect"
)

// clusterFaults injects one cluster fault after another until ctx ends.
// The kinds come in shuffled rounds, so that a short run has each of them
// once the first round is through. After each fault has healed, the
// cluster must be whole again within recoveryTimeout (else a violation).
func (e *engine) clusterFaults(ctx context.Context) {
	iv := e.cfg.ClusterFaultInterval
	kinds := clusterFaultKinds
	if len(e.cfg.ClusterFaults) > 0 {
		kinds = e.cfg.ClusterFaults
	}
	for {
		deck := slices.Clone(kinds)
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
func (e *engine) linkFault() (mode linkMode, name string, hold time.Duration) {
	mode, name = linkDrop, "dropped"
	if e.chance(0.5) {
		mode, name = linkBlackHole, "black-holed"
	}
	return mode, name, e.uniform(3*e.electionTimeout(), 3*e.electionTimeout()+3*time.Second)
}

// killFault kills node i (kind leader-kill or follower-kill); a leader kill
// in a five-node cluster takes a follower down with it half the time.
func (e *engine) killFault(ctx context.Context, kind string, i int) string {
	if kind == "leader-kill" && len(e.localNodes) >= 5 && e.chance(0.5) {
		j := e.follower(i)
		downs := make(chan time.Duration, 1)
		go func() { downs <- e.crash(ctx, e.localNodes[j], true).down }()
		down := e.crash(ctx, e.localNodes[i], true).down
		other := <-downs
		e.countCluster(func(s *ClusterFaultStats) { s.LeaderKills++; s.TwoDown++ })
		return fmt.Sprintf("%s: kill -9 %s (down %v) and follower %s (down %v) at once", kind,
			e.localNodes[i].Name(), down.Round(time.Millisecond), e.localNodes[j].Name(), other.Round(time.Millisecond))
	}
	down := e.crash(ctx, e.localNodes[i], true).down
	e.countCluster(func(s *ClusterFaultStats) {
		if kind == "leader-kill" {
			s.LeaderKills++
		} else {
			s.FollowerKills++
		}
	})
	return fmt.Sprintf("%s: kill -9 %s, down %v", kind, e.localNodes[i].Name(), down.Round(time.Millisecond))
}

// pauseLeader freezes the leader for 3 to 6 election timeouts.
func (e *engine) pauseLeader(ctx context.Context, leader int) string {
	d := e.uniform(3*e.electionTimeout(), 6*e.electionTimeout())
	p := e.localNodes[leader].proc
	if err := p.signal(sigStop); err != nil {
		return "leader-pause failed: " + err.Error()
	}
	sleepCtx(ctx, d)
	_ = p.signal(sigCont)
	e.countCluster(func(s *ClusterFaultStats) { s.LeaderPauses++ })
	return fmt.Sprintf("leader-pause: SIGSTOP %s for %v", p.name, d.Round(time.Millisecond))
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
	e.netem.partition(mode, []int{i}, rest)
	sleepCtx(ctx, hold)
	e.netem.heal()
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
		e.netem.partition(mode, minority, majority)
		desc = append(desc, e.names(minority)+"|"+e.names(majority))
		e.countCluster(func(s *ClusterFaultStats) { s.SplitSteps++ })
		if !sleepCtx(ctx, e.uniform(2*e.electionTimeout(), 2*e.electionTimeout()+2*time.Second)) {
			break
		}
	}
	e.netem.heal()
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
		e.netem.setDelay(a, b, e.uniform(20*time.Millisecond, 150*time.Millisecond))
	}
	sleepCtx(ctx, hold)
	e.netem.heal()
	e.countCluster(func(s *ClusterFaultStats) { s.SlowLinks++ })
	return fmt.Sprintf("slow-links: %d directed links delayed for %v", links, hold.Round(time.Millisecond))
}

// rollingRestart restarts every node in turn, waiting each time until the
// cluster is whole.
func (e *engine) rollingRestart() string {
	for _, i := range e.perm(len(e.localNodes)) {
		nd := e.localNodes[i]
		if nd.stop(10 * time.Second) {
			e.logf("rolling restart: %s did not stop within 10s and was killed", nd.Name())
		} else {
			e.checkExit(nd.proc)
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
	if err := os.RemoveAll(nd.spec.DataDir); err != nil {
		e.logf("member-re-add: wipe %s: %v", nd.spec.DataDir, err)
	}
	spec := nd.spec
	spec.InitialCluster, spec.Join = "", true
	nd.respec(e.cfg.Command, spec)
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
