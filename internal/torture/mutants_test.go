package torture

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencedio/fenced/internal/failpoint"
	"github.com/fencedio/fenced/internal/testenv"
	"github.com/fencedio/fenced/internal/torture/check"
	"github.com/fencedio/fenced/internal/torture/proc"
)

// TestMutants measures the checkers: it builds this package's test binary
// with the fenced_failpoints tag, then runs a short torture with each
// mutant of internal/failpoint switched on in the node, and requires every
// run to report violations, two runs at a time (mutantsAtOnce). The
// untagged control is TestTorture, which must report none. The tagged
// binary is built without -race: the runs look for lease bugs, and the
// race detector would triple their CPU.
//
// CI runs it with the rest of the package:
//
//	go test -race -count=1 -timeout 15m ./internal/torture/ -run 'TestMutants'
func TestMutants(t *testing.T) {
	if testing.Short() {
		t.Skip("mutant runs take minutes; skipped with -short")
	}
	testenv.SkipUnlessLong(t)
	if !proc.SignalsSupported {
		t.Skip(proc.ErrUnsupported)
	}
	start := time.Now()
	bin := buildMutantBinary(t)
	t.Logf("built %s in %v", bin, time.Since(start).Round(time.Second))
	names := failpoint.All
	if only := os.Getenv("FENCED_MUTANTS"); only != "" {
		names = nil
		for _, n := range strings.Split(only, ",") {
			names = append(names, failpoint.Name(n))
		}
	}
	var caught atomic.Int32
	slots := make(chan struct{}, mutantsAtOnce)
	t.Run("runs", func(t *testing.T) {
		for _, name := range names {
			t.Run(string(name), func(t *testing.T) {
				t.Parallel()
				slots <- struct{}{}
				defer func() { <-slots }()
				if catchMutant(t, bin, name) {
					caught.Add(1)
				}
			})
		}
	})
	t.Logf("mutants caught: %d/%d in %v", caught.Load(), len(names), time.Since(start).Round(time.Second))
}

// mutantsAtOnce is how many mutant runs go at once. A run spends most of
// its time waiting on leases, timeouts and faults (two at once used 56 s of
// CPU in 4 min 45 s on two cores), so two share a machine without slowing
// each other's faults.
const mutantsAtOnce = 2

// catchMutant runs a torture with mutant name on and reports whether the
// checkers caught it.
func catchMutant(t *testing.T, bin string, name failpoint.Name) bool {
	cfg := mutantConfig(t, name)
	cfg.Command = []string{bin}
	rep := runTorture(t, cfg)
	if rep.Acquisitions.OK == 0 {
		t.Fatalf("mutant %s: no lease was granted, nothing was tested", name)
	}
	var by []string
	for _, c := range rep.Checks {
		if c.Violations > 0 {
			by = append(by, fmt.Sprintf("%s=%d", c.Name, c.Violations))
		}
		if c.Violations > 0 && c.Name == check.NameSequences {
			by = append(by, "("+c.Note+")") // which guards applied a copy
		}
	}
	if rep.Violations == 0 {
		t.Errorf("mutant %s survived: the checkers reported no violation", name)
		return false
	}
	t.Logf("mutant %s caught: %s; first violation %.1fs into the run", name, strings.Join(by, ", "), rep.FirstViolationSeconds)
	return true
}

// buildMutantBinary compiles this package's tests with the failpoints in.
func buildMutantBinary(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the mutant test builds a tagged binary and needs the go command: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "torture-mutants.test")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goBin, "test", "-c", "-tags", "fenced_failpoints", "-o", bin, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go test -c -tags fenced_failpoints: %v\n%s", err, out)
	}
	return bin
}

// mutantConfig is a short run with every fault on, at a kill rate high
// enough that a bug that needs a crash (a lost acknowledged log write, a
// restore that drops leases) meets one.
func mutantConfig(t *testing.T, name failpoint.Name) Config {
	cfg := tortureConfig(t, 20*time.Second)
	cfg.Failpoints = []string{string(name)}
	cfg.StoreCrashInterval = 0
	cfg.CheckTimeout = 15 * time.Second
	if slices.Contains([]failpoint.Name{failpoint.LogAckBeforeWrite, failpoint.RestoreDropsLeases}, name) {
		// The node is back, and leads, well within a TTL: a lease the
		// crash lost then shows in its holder's next renewal.
		cfg.CrashInterval = 1500 * time.Millisecond
		cfg.DownMin, cfg.DownMax = 50*time.Millisecond, 200*time.Millisecond
		cfg.NodeHeartbeatTimeout = 150 * time.Millisecond
		cfg.SnapshotBeforeCrash = 0.7
	}
	if name == failpoint.GrantHeld || name == failpoint.ReleaseAnyID {
		// Both need a key that is held by someone else: an acquisition
		// running into a holder, or a release from a holder that was
		// frozen past its lease while another took the key.
		cfg.Workers, cfg.Keys = 5, 2
		cfg.PauseProbability = 0.6
		cfg.Duration = 25 * time.Second
	}
	if name == failpoint.ReleaseAnyID {
		// A stale release is sent only when a holder frozen past its
		// lease releases before its client's next renewal finds out.
		cfg.PauseProbability = 0.9
		cfg.Duration = 30 * time.Second
	}
	if name == failpoint.GrantHeld {
		// A waiting acquisition tries the key only at the head of the
		// line; one that does not wait tries it every ~50ms.
		cfg.TryProbability = 0.8
	}
	if name == failpoint.DeposedLeaderRenews {
		// Only a cluster has deposed leaders: the faults that depose one
		// while its clients go on renewing there.
		cfg.Nodes = 3
		cfg.ClusterFaults = []string{"leader-pause", "leader-isolation", "moving-split"}
		cfg.ClusterFaultInterval = 2 * time.Second
		cfg.Duration = 40 * time.Second
	}
	if name == failpoint.LogSkipFsync {
		// Every kill a power loss, most right after an acknowledgement.
		// Snapshots (files the simulation leaves alone) keep the cluster
		// configuration, so that the node comes back without the entries
		// written since the last one; none is forced before a kill.
		cfg.LoseUnsynced = true
		cfg.AfterAckShare = 0.8
		cfg.CrashInterval = 1500 * time.Millisecond
		cfg.DownMin, cfg.DownMax = 50*time.Millisecond, 200*time.Millisecond
		cfg.NodeHeartbeatTimeout = 150 * time.Millisecond
		cfg.SnapshotBeforeCrash = -1
	}
	if name == failpoint.LogAckEarly {
		// The write lands a fraction of a millisecond after the
		// acknowledgement: every kill is timed from the node's own report
		// of it, and is a power loss, so that a write the kill caught
		// between its write and its fsync is lost as well.
		cfg.AfterAckShare = 1
		cfg.LoseUnsynced = true
		cfg.CrashInterval = 500 * time.Millisecond
		cfg.DownMin, cfg.DownMax = 50*time.Millisecond, 200*time.Millisecond
		cfg.NodeHeartbeatTimeout = 150 * time.Millisecond
		cfg.SnapshotBeforeCrash = -1
		cfg.NodeSnapshotThreshold = 1 << 20
		cfg.Duration = 20 * time.Second // first violation after 3.5 s (median of 10 runs, at most 14.2 s)
	}
	if name == failpoint.NewLeaderNoFreshTTL {
		// Every leader change with leases held longer than a TTL.
		cfg.Nodes = 3
		cfg.ClusterFaults = []string{"leader-kill", "leader-pause", "leader-isolation"}
		cfg.ClusterFaultInterval = 1500 * time.Millisecond
	}
	if name == failpoint.RenewWithoutQuorumContact {
		// The leader's main loop hangs in a log write while it is cut off:
		// raft's leader lease, which would make it step down, is not
		// checked, and its API renews from its own deadlines after a
		// successor took over and past the successor's expiries.
		// Every lease is held for several renewals, and no holder is
		// frozen: each renews at the stalled leader through the fault.
		cfg.Nodes = 3
		cfg.ClusterFaults = []string{"leader-disk-stall"}
		cfg.ClusterFaultInterval = time.Second
		cfg.Workers, cfg.LongHoldShare, cfg.PauseProbability = 6, 1, -1
		cfg.Duration = 25 * time.Second // first violation after 7.3 s (median of 20 runs, at most 14.2 s)
	}
	if name == failpoint.ReelectedLeaderOldDeadlines {
		// The leadership handed to a follower for 2/3 to 1 TTL and back:
		// every held lease is renewed at the follower meanwhile, and the
		// node that leads again holds its old term's deadlines for it.
		// Every lease is held for several renewals, and no holder is
		// frozen, so that each is renewed through the fault.
		cfg.Nodes = 3
		cfg.ClusterFaults = []string{"leader-reelect"}
		cfg.ClusterFaultInterval = time.Second
		cfg.Workers, cfg.LongHoldShare, cfg.PauseProbability = 6, 1, -1
		cfg.Duration = 15 * time.Second // first violation after 2.1 s (median of 7 runs, at most 2.6 s)
	}
	if name == failpoint.GuardReappliesEqualSequence {
		// Most writes sequenced, and half of their answers thrown away:
		// each such write is resent, and a copy of one applied is applied
		// again, in the store and in PostgreSQL. The store crashes too, so
		// that resends also follow unknown outcomes that are not injected.
		cfg.SequenceShare, cfg.LostAnswerShare = 0.8, 0.5
		cfg.StoreCrashInterval = 5 * time.Second
		cfg.Duration = 10 * time.Second // first violation after 0.1 s (median of 7 runs, at most 0.2 s)
	}
	if name == failpoint.FollowerLocalRead {
		// A cut-off follower answers reads from its stale state.
		cfg.Nodes = 3
		cfg.ClusterFaults = []string{"follower-isolation", "slow-links"}
		cfg.ClusterFaultInterval = time.Second
		cfg.GetProbability, cfg.FollowerReadShare = 1, 1
		cfg.Duration = 15 * time.Second // first violation after 0.7 s (median of 10 runs, at most 5.8 s)
	}
	if name == failpoint.SilentRebootstrap {
		// A member wiped while a minority lags and the leader's side goes
		// down: one that bootstraps again silently rejoins on its own.
		cfg.Nodes = 3
		cfg.ClusterFaults = []string{"disk-loss"}
		cfg.ClusterFaultInterval = time.Second
		cfg.Duration = 15 * time.Second // first violation after 2.5 s (median of 10 runs, at most 2.9 s)
	}
	if name == failpoint.LogAckBeforeWrite {
		// Every kill right after an acknowledgement; no snapshots, whose
		// log truncation waits for the late writes.
		cfg.AfterAckShare = 1
		cfg.Duration = 30 * time.Second
		cfg.CrashInterval = time.Second
		cfg.SnapshotBeforeCrash = -1
		cfg.NodeSnapshotThreshold = 1 << 20
	}
	if name == failpoint.ConsumerAppliesStale {
		// The queue path, with most leases' messages delayed behind later
		// holders' and many holders frozen past their TTL.
		cfg.QueueURL = testenv.AMQPURL(t)
		cfg.QueueDelayShare, cfg.PauseProbability = 0.5, 0.5
	}
	operatorMutantConfig(&cfg, name)
	return cfg
}
