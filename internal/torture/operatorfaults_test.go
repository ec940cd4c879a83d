package torture

import (
	"slices"
	"testing"
	"time"

	"github.com/fencedio/fenced/internal/failpoint"
)

// TestOperatorFaultsTorture is a three-node run with only the operator
// faults (wal-loss, rollback, foreign-cluster, and cluster-restore at the
// end): each must have been injected and refused, and the run clean.
func TestOperatorFaultsTorture(t *testing.T) {
	cfg := tortureConfig(t, 60*time.Second)
	cfg.Nodes = 3
	cfg.ClusterFaults = slices.Clone(operatorFaultKinds)
	cfg.ClusterFaultInterval = 2 * time.Second
	rep := runTorture(t, cfg)
	for _, kind := range operatorFaultKinds {
		if rep.Cluster.Kinds()[kind] == 0 {
			t.Errorf("the run injected no %s", kind)
		}
	}
	for _, name := range []string{NameOperatorRefused, NameRestoreTokens} {
		if c := rep.Check(name); c.Name == "" || c.Skipped != "" || c.Checked == 0 {
			t.Errorf("checker %s did not run: %+v", name, c)
		}
	}
	for _, c := range rep.Checks {
		if c.Violations > 0 {
			t.Errorf("%s: %d violations: %q", c.Name, c.Violations, c.Examples)
		}
	}
}

// operatorMutantConfig sets up TestMutants' run of the mutants that only
// the operator faults can catch.
func operatorMutantConfig(cfg *Config, name failpoint.Name) {
	switch name {
	case failpoint.HelloAcceptsAnyCluster:
		// A member restarted on a directory restored from a backup, and a
		// foreign cluster of one asked to add the members.
		cfg.Nodes = 3
		cfg.ClusterFaults = []string{"foreign-cluster"}
		cfg.ClusterFaultInterval = time.Second
		cfg.Duration = 15 * time.Second
	case failpoint.LostLogVotes:
		// A member whose wal/ was deleted, started when its vote decides.
		cfg.Nodes = 3
		cfg.ClusterFaults = []string{"wal-loss"}
		cfg.ClusterFaultInterval = time.Second
		cfg.Duration = 15 * time.Second
	case failpoint.AcksIgnored:
		// A member started on an older copy of its own directory.
		cfg.Nodes = 3
		cfg.ClusterFaults = []string{"rollback"}
		cfg.ClusterFaultInterval = time.Second
		cfg.Duration = 25 * time.Second
	case failpoint.RestoreIgnoresBumpAndFloor:
		// Only the end-of-run restore, whose first round brings a member
		// of the old cluster back beside the restored ones: the run before
		// it needs no fault and only a few grants.
		cfg.Nodes = 3
		cfg.ClusterFaults = []string{"cluster-restore"}
		cfg.Duration = 3 * time.Second
	}
}

func TestRunKindsLeaveEndPhaseOut(t *testing.T) {
	got := runKinds([]string{"leader-kill", "cluster-restore", "wal-loss"})
	if !slices.Equal(got, []string{"leader-kill", "wal-loss"}) {
		t.Errorf("runKinds = %q", got)
	}
	if len(runKinds([]string{"cluster-restore"})) != 0 {
		t.Error("cluster-restore runs during the run")
	}
}

func TestRefusedCluster(t *testing.T) {
	line := `time=x level=ERROR msg="peer connection refused" err="peer belongs to another cluster: node3 (127.0.0.1:1) has the cluster ID abc, this member def. ..."`
	if !refusedCluster("a\n"+line+"\nb", "abc") || !refusedCluster(line, "") {
		t.Error("the refusal line was not recognised")
	}
	if refusedCluster(line, "xyz") || refusedCluster("peer runs on a rolled-back data directory abc", "abc") {
		t.Error("a line that does not refuse cluster xyz was taken for one")
	}
}
