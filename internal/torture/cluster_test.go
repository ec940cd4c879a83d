package torture

import (
	"slices"
	"testing"
	"time"
)

// TestClusterTorture is the CI cluster run: three nodes behind link
// proxies, at most three minutes in all, under every cluster fault kind
// and the single-node faults that apply (worker pauses, delayed writes,
// store crashes). It must report no violation, and must have injected
// every kind of cluster fault at least once: a run that skipped one
// proves nothing about it.
func TestClusterTorture(t *testing.T) {
	cfg := tortureConfig(t, 100*time.Second)
	cfg.Nodes = 3
	cfg.ClusterFaultInterval = 2 * time.Second
	start := time.Now()
	rep := runTorture(t, cfg)
	if d := time.Since(start); d > 3*time.Minute {
		t.Errorf("the cluster run took %v, more than the 3 minutes CI allows", d.Round(time.Second))
	}
	requireFaults(t, rep)
	for kind, n := range rep.Cluster.Kinds() {
		if n == 0 && slices.Contains(defaultClusterFaultKinds, kind) {
			t.Errorf("the run injected no %s", kind)
		}
	}
	if rep.Cluster.Recoveries == 0 {
		t.Error("the cluster was never seen whole after a fault")
	}
	for _, name := range []string{NameConvergence, NameNodesBack} {
		if c := rep.Check(name); c.Name == "" || c.Skipped != "" || c.Checked == 0 {
			t.Errorf("checker %s did not run: %+v", name, c)
		}
	}
	for _, c := range rep.Checks {
		if c.Violations > 0 {
			t.Errorf("%s: %d violations: %q", c.Name, c.Violations, c.Examples)
		}
	}
	if !rep.Passed() {
		t.Error("report says the run failed")
	}
}
