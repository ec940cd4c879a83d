package torture

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"connectrpc.com/connect"

	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/api/fenced/v1/fencedv1connect"
	"github.com/fencedio/fenced/internal/testutil"
	"github.com/fencedio/fenced/internal/torture/check"
	"github.com/fencedio/fenced/internal/torture/netfault"
	"github.com/fencedio/fenced/internal/torture/proc"
	"github.com/fencedio/fenced/server"
)

// ClusterFaultStats counts the faults injected into a cluster (Nodes > 1).
// Each fault heals, and the harness waits for the cluster to serve again
// with every node back, before the next one.
type ClusterFaultStats struct {
	// LeaderKills and FollowerKills are kill -9 of the node that leads, or
	// of one that does not; the node restarts after DownMin..DownMax.
	LeaderKills   int `json:"leaderKills"`
	FollowerKills int `json:"followerKills"`
	// TwoDown counts leader kills of a five-node cluster that also killed
	// a follower at the same moment: two nodes down at once, the most a
	// five-node cluster survives.
	TwoDown int `json:"twoDown"`
	// LeaderPauses freeze the leader (SIGSTOP) for longer than an
	// election takes (2.5 election timeouts) but shorter than the TTL
	// (0.9 TTL), so that the deposed leader wakes with live deadlines
	// (3 to 6 election timeouts when the TTL leaves no such room).
	// HoldersFrozen counts the pauses after which every worker holding a
	// lease was frozen past its TTL as the leader woke: a renewal the
	// deposed leader acknowledged on waking is then its holder's last.
	// RenewalsOnWaking counts the pauses after which the woken leader was
	// seen (from its own reports) answering a renewal, itself or by
	// forwarding it: those holders are always frozen.
	LeaderPauses     int `json:"leaderPauses"`
	HoldersFrozen    int `json:"holdersFrozen"`
	RenewalsOnWaking int `json:"renewalsOnWaking"`
	// LeaderReelections hand the leadership to a follower, which leads
	// for 2/3 to 1 TTL, and back to the same node (process), which so
	// leads again within about a TTL of losing it (leader-reelect).
	LeaderReelections int `json:"leaderReelections"`
	// AimedLeaderKills counts leader kills sent within a millisecond
	// after a node reported an acknowledgement (nodes with the failpoints
	// build only).
	AimedLeaderKills int `json:"aimedLeaderKills"`
	// LeaderIsolations and FollowerIsolations cut one node off from all
	// the others, both directions, by dropping or black-holing its links,
	// for longer than an election takes and shorter than the TTL when the
	// TTL leaves room.
	LeaderIsolations   int `json:"leaderIsolations"`
	FollowerIsolations int `json:"followerIsolations"`
	// MovingSplits split the cluster into a minority and a majority, two
	// or three times in a row with different sides, then heal;
	// SplitSteps counts the splits.
	MovingSplits int `json:"movingSplits"`
	SplitSteps   int `json:"splitSteps"`
	// SlowLinks delay the traffic of random links by 20-150ms for a while.
	SlowLinks int `json:"slowLinks"`
	// RollingRestarts restart every node in turn (SIGTERM, start, wait
	// until the cluster serves); NodeRestarts counts the nodes.
	RollingRestarts int `json:"rollingRestarts"`
	NodeRestarts    int `json:"nodeRestarts"`
	// MemberReAdds remove a follower from the configuration (after killing
	// it), wipe its data and add it back as a new empty node (--join).
	MemberReAdds int `json:"memberReAdds"`
	// DiskLosses delete a member's data directory while it is down and
	// start it again with its usual command line, at the worst moment: a
	// minority lags (isolated) while the leader and the member commit, then
	// the leader's side goes down, so that the lagging nodes need the
	// wiped member's vote. A member that forgets and votes hands acknowledged
	// leases away. WipedRefused counts the wiped members that did not
	// rejoin on their own (they refused, as they must); each was then
	// recovered as documented (member remove, wipe, --join, member add),
	// counted in WipedRecovered.
	DiskLosses int `json:"diskLosses"`
	// LeaderDiskStalls hung the leader's raft log writes while it was cut
	// off, past an election and a TTL (leader-disk-stall).
	LeaderDiskStalls int `json:"leaderDiskStalls"`
	WipedRefused     int `json:"wipedRefused"`
	WipedRecovered   int `json:"wipedRecovered"`
	// Operator counts the faults aimed at what operators do
	// (operatorfaults.go).
	Operator OperatorFaultStats `json:"operator"`
	// Recoveries counts the times the cluster was seen whole and serving
	// after a fault; NoLeader counts faults skipped because no leader was
	// found to aim them at.
	Recoveries int `json:"recoveries"`
	NoLeader   int `json:"noLeader"`
}

// ClusterFaultKinds names the kinds of cluster faults, for
// Config.ClusterFaults.
var ClusterFaultKinds = clusterFaultKinds

var clusterFaultKinds = []string{"leader-kill", "follower-kill", "leader-pause", "leader-reelect", "leader-isolation",
	"follower-isolation", "moving-split", "slow-links", "rolling-restart", "member-re-add", "disk-loss", "leader-disk-stall",
	"wal-loss", "rollback", "foreign-cluster", "cluster-restore"}

// defaultClusterFaultKinds are the kinds a run injects unless told
// otherwise: all but disk-loss, which leaves the cluster unavailable for
// seconds each time, the operator faults but foreign-cluster
// (operatorByNameOnly), all asked for by name, and leader-disk-stall, which
// needs nodes built with the failpoints and joins the default kinds of a
// run whose nodes carry them (clusterFaultDeck).
var defaultClusterFaultKinds = slices.DeleteFunc(slices.Clone(clusterFaultKinds), func(k string) bool {
	return k == "disk-loss" || k == "leader-disk-stall" || slices.Contains(operatorByNameOnly, k)
})

// Kinds returns the count of each fault kind, by name.
func (s ClusterFaultStats) Kinds() map[string]int {
	return map[string]int{
		"leader-kill": s.LeaderKills, "follower-kill": s.FollowerKills, "leader-pause": s.LeaderPauses,
		"leader-reelect":   s.LeaderReelections,
		"leader-isolation": s.LeaderIsolations, "follower-isolation": s.FollowerIsolations,
		"moving-split": s.MovingSplits, "slow-links": s.SlowLinks, "rolling-restart": s.RollingRestarts,
		"member-re-add": s.MemberReAdds, "disk-loss": s.DiskLosses, "leader-disk-stall": s.LeaderDiskStalls,
		"wal-loss": s.Operator.WalLosses, "rollback": s.Operator.Rollbacks, "foreign-cluster": s.Operator.ForeignClusters,
		"cluster-restore": s.Operator.ClusterRestores,
	}
}

// recoveryTimeout bounds how long a cluster may take to serve again, whole,
// after a fault has healed.
const recoveryTimeout = 30 * time.Second

// startCluster starts cfg.Nodes nodes that form one cluster, each with a
// link proxy in front of its raft peer port, whose address is the one its
// peers dial (--raft-advertise and --initial-cluster).
func (e *engine) startCluster(ctx context.Context) error {
	cfg := &e.cfg
	e.netem = netfault.NewNetwork()
	specs := make([]proc.NodeSpec, cfg.Nodes)
	var initial []string
	for i := range cfg.Nodes {
		ip := netfault.NodeIP(i)
		listen, err := testutil.FreeAddrOn(ip)
		if err != nil {
			return fmt.Errorf("torture: cluster node on %s: %w (Linux routes all of 127.0.0.0/8 to loopback; other systems may need aliases)", ip, err)
		}
		raftAddr, err := testutil.FreeAddrOn(ip)
		if err != nil {
			return err
		}
		p, err := netfault.NewLinkProxy(e.netem, i, raftAddr)
		if err != nil {
			return err
		}
		e.linkProxies = append(e.linkProxies, p)
		e.netem.AddNode(ip, i)
		id := fmt.Sprintf("node%d", i+1)
		specs[i] = proc.NodeSpec{
			NodeID: id, DataDir: filepath.Join(cfg.OutputDir, id), Listen: listen, RaftListen: raftAddr,
			RaftAdvertise: p.Addr(), MinTTL: cfg.NodeMinTTL, HeartbeatTimeout: cfg.NodeHeartbeatTimeout,
			SnapshotThreshold: cfg.NodeSnapshotThreshold, SnapshotInterval: cfg.NodeSnapshotInterval,
		}
		initial = append(initial, id+"="+p.Addr())
	}
	for i := range specs {
		specs[i].InitialCluster = strings.Join(initial, ",")
		if err := e.addLocalNode(ctx, specs[i]); err != nil {
			return err
		}
	}
	wctx, cancel := context.WithTimeout(ctx, recoveryTimeout)
	defer cancel()
	if err := e.awaitCluster(wctx); err != nil {
		return fmt.Errorf("torture: the cluster did not form: %w (see the nodes' logs in %s)", err, cfg.OutputDir)
	}
	e.logf("cluster of %d formed: %s", cfg.Nodes, strings.Join(initial, ","))
	return nil
}

// electionTimeout is the nodes' raft heartbeat (and election) timeout.
func (e *engine) electionTimeout() time.Duration {
	if e.cfg.NodeHeartbeatTimeout > 0 {
		return e.cfg.NodeHeartbeatTimeout
	}
	return 500 * time.Millisecond
}

// endpoints are the API base URLs of every node, starting at node first.
func (e *engine) endpoints(first int) []string {
	var out []string
	for i := range e.nodes {
		out = append(out, e.nodes[(first+i)%len(e.nodes)].Endpoint())
	}
	return out
}

func getJSON(ctx context.Context, url string, out any) error {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: HTTP %d", url, resp.StatusCode)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// roles asks every node for its role; a node that does not answer has a
// zero Role.
func (e *engine) roles(ctx context.Context) []server.Role {
	out := make([]server.Role, len(e.localNodes))
	for i, n := range e.localNodes {
		_ = getJSON(ctx, n.Endpoint()+"/v1/role", &out[i])
	}
	return out
}

// leader returns the index of the node that says it leads and is ready,
// or -1.
func (e *engine) leader(ctx context.Context) int {
	for i, r := range e.roles(ctx) {
		if r.Role == "leader" && r.Ready {
			return i
		}
	}
	return -1
}

// waitLeader polls for a ready leader for up to d.
func (e *engine) waitLeader(ctx context.Context, d time.Duration) int {
	deadline := time.Now().Add(d)
	for {
		if l := e.leader(ctx); l >= 0 || time.Now().After(deadline) || ctx.Err() != nil {
			return l
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// awaitCluster waits until the cluster is whole: every node runs, answers
// /healthz (it can serve acquisitions), votes, names the same leader, and
// that leader's configuration has every node as a voter.
func (e *engine) awaitCluster(ctx context.Context) error {
	var last string
	for {
		last = e.clusterWhole(ctx)
		if last == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s", last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// clusterWhole returns "" if the cluster is whole, or what is missing.
func (e *engine) clusterWhole(ctx context.Context) string {
	for _, n := range e.localNodes {
		if !n.Up() {
			return n.Name() + " is not running"
		}
	}
	rs := e.roles(ctx)
	leader := ""
	for i, r := range rs {
		if r.NodeID == "" {
			return e.localNodes[i].Name() + " does not answer /v1/role"
		}
		if !r.Votes {
			return e.localNodes[i].Name() + " does not vote (it waits to be added)"
		}
		if r.Role == "leader" && r.Ready {
			leader = r.NodeID
		}
	}
	if leader == "" {
		return "no ready leader"
	}
	for i, r := range rs {
		if r.LeaderID != leader {
			return fmt.Sprintf("%s names leader %q, not %s", e.localNodes[i].Name(), r.LeaderID, leader)
		}
		if r.NodeID == leader {
			voters := 0
			for _, m := range r.Members {
				if m.Suffrage == "voter" {
					voters++
				}
			}
			if voters != len(e.localNodes) || len(r.Members) != len(e.localNodes) {
				return fmt.Sprintf("the leader's configuration is %+v, want %d voters", r.Members, len(e.localNodes))
			}
		}
	}
	for _, n := range e.localNodes {
		if !n.Healthy() {
			return n.Name() + " is not healthy"
		}
	}
	return ""
}

// Checker names of a cluster run.
const (
	NameConvergence = "nodes-converge"
	NameNodesBack   = "nodes-come-back"
	// NameWipedRefuses fails for every member that lost its data directory
	// (disk-loss) and became a voter again without being removed and
	// added back: it forgot its votes and log, and counts toward quorums.
	NameWipedRefuses = "wiped-member-refuses"
)

// nodeState is one node's applied state at the end of a run.
type nodeState struct {
	Applied uint64
	Leases  []string // key, lease ID, token, owner of each lease
}

func (e *engine) nodeState(ctx context.Context, n *proc.LocalNode) (nodeState, error) {
	var st server.Stats
	if err := getJSON(ctx, n.Endpoint()+"/v1/stats", &st); err != nil {
		return nodeState{}, err
	}
	c := fencedv1connect.NewLeaseServiceClient(http.DefaultClient, n.Endpoint())
	req := connect.NewRequest(&fencedv1.ListRequest{})
	req.Header().Set("Fenced-Stale-Read", "true")
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := c.List(cctx, req)
	if err != nil {
		return nodeState{}, err
	}
	out := nodeState{Applied: st.AppliedIndex}
	for _, l := range resp.Msg.GetLeases() {
		out.Leases = append(out.Leases, fmt.Sprintf("%s id=%s token=%d owner=%s", l.GetKey(), l.GetLeaseId(), l.GetToken(), l.GetOwner()))
	}
	sort.Strings(out.Leases)
	return out, nil
}

// checkCluster runs after the workers stopped and before the nodes do:
// every node must be back (NameNodesBack, which also holds the recoveries
// that failed during the run), and once the cluster is quiet, every node
// must have applied the same index and hold the same leases, read from
// its own state (NameConvergence).
func (e *engine) checkCluster() []check.Result {
	back := check.Result{Name: NameNodesBack}
	conv := check.Result{Name: NameConvergence}
	e.mu.Lock()
	wiped := check.Result{Name: NameWipedRefuses, Checked: e.stats.Cluster.DiskLosses}
	for _, w := range e.rejoinedWiped {
		wiped.AddViolationAt(w.at, "%s", w.what)
	}
	back.Checked = e.stats.Cluster.Recoveries + len(e.recoveryProblems) + 1
	for _, p := range e.recoveryProblems {
		back.AddViolation("%s", p)
	}
	e.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), recoveryTimeout)
	defer cancel()
	if err := e.awaitCluster(ctx); err != nil {
		back.AddViolation("at the end of the run, the cluster was not whole within %v: %v", recoveryTimeout, err)
		conv.Skipped = "the cluster was not whole"
		return []check.Result{back, conv, wiped}
	}
	// Quiet: no applied index moves between two reads of every node's
	// state, and all are equal. Abandoned leases may still expire, so
	// this is retried.
	var diff string
	for ctx.Err() == nil {
		var states []nodeState
		ok := true
		for _, n := range e.localNodes {
			st, err := e.nodeState(ctx, n)
			if err != nil {
				diff, ok = fmt.Sprintf("%s: %v", n.Name(), err), false
				break
			}
			states = append(states, st)
		}
		if ok {
			conv.Checked = len(states)
			diff = ""
			for i, st := range states[1:] {
				if st.Applied != states[0].Applied {
					diff = fmt.Sprintf("%s applied index %d, %s %d", e.localNodes[0].Name(), states[0].Applied, e.localNodes[i+1].Name(), st.Applied)
					break
				}
				if !slices.Equal(st.Leases, states[0].Leases) {
					diff = fmt.Sprintf("at applied index %d, %s holds %q but %s holds %q", st.Applied,
						e.localNodes[0].Name(), states[0].Leases, e.localNodes[i+1].Name(), st.Leases)
					break
				}
			}
			if diff == "" {
				conv.Note = fmt.Sprintf("%d nodes at applied index %d with %d leases", len(states), states[0].Applied, len(states[0].Leases))
				return []check.Result{back, conv, wiped}
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	conv.AddViolation("the nodes never agreed within %v: %s", recoveryTimeout, diff)
	return []check.Result{back, conv, wiped}
}
