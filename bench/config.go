package bench

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Config configures Run. The zero value is the full run.
type Config struct {
	// Duration of one measured run of one workload against one system.
	// Default 10s (quick: 300ms).
	Duration time.Duration
	// Rounds is how many times each workload runs against each system; the
	// report shows the medians. Default 3 (quick: 1).
	Rounds int
	// Warmup is an unmeasured acquire-release run of every system, with
	// 16 clients, before the first round. Default 3s (quick: none).
	Warmup time.Duration
	// Leases is how many live leases the memory workload creates. Default
	// 1,000,000 (quick: 5,000).
	Leases int
	// Workloads selects workloads by name (see Workloads); empty means all.
	Workloads []string
	// Clients, when set, replaces the client counts of the acquire-release
	// workload (default 1, 16 and 64).
	Clients []int
	// Systems selects the systems to run, in the order of the table (see
	// SystemNames). Default: fenced and etcd.
	Systems []string
	// Quick turns every default above into its quick value, for smoke tests
	// that take seconds. Explicitly set fields still win.
	Quick bool

	// BenchDir is the directory of the bench module, whose parent is the
	// fenced repository. Default: found from the working directory upwards.
	BenchDir string
	// FencedBin and EtcdBin are prebuilt server binaries. Default: built
	// from source into the temporary directory with `go build`.
	FencedBin, EtcdBin string
	// ZooKeeperJar is the ZooKeeper server of the zk systems. Default:
	// DefaultZooKeeperJar (Debian's zookeeper package).
	ZooKeeperJar string
	// FencedBoltBin is the fenced binary of the fenced-bolt system: a
	// build of a revision that kept the raft log in raft-boltdb.
	FencedBoltBin string
	// KeepTemp keeps the temporary directory (data, logs, binaries) for
	// inspection instead of removing it.
	KeepTemp bool
}

// withDefaults returns c with each zero field set to its default, except
// BenchDir, which Run looks for only when it needs it.
func (c Config) withDefaults() Config {
	if c.Duration == 0 {
		c.Duration = pick(c.Quick, 300*time.Millisecond, 10*time.Second)
	}
	if c.Rounds == 0 {
		c.Rounds = pick(c.Quick, 1, 3)
	}
	if c.Warmup == 0 {
		c.Warmup = pick(c.Quick, 0, 3*time.Second)
	}
	if c.Leases == 0 {
		c.Leases = pick(c.Quick, 5_000, 1_000_000)
	}
	if len(c.Systems) == 0 {
		c.Systems = defaultSystems
	}
	if c.ZooKeeperJar == "" {
		c.ZooKeeperJar = DefaultZooKeeperJar
	}
	return c
}

// Validate checks the settings as Run would use them, zero fields replaced
// by their defaults. It does not change c.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.Duration < 0:
		return fmt.Errorf("bench config: duration %v is negative", c.Duration)
	case c.Warmup < 0:
		return fmt.Errorf("bench config: warm-up %v is negative", c.Warmup)
	case c.Rounds < 0:
		return fmt.Errorf("bench config: rounds %d is negative", c.Rounds)
	case c.Leases < 0:
		return fmt.Errorf("bench config: leases %d is negative", c.Leases)
	}
	for _, n := range c.Clients {
		if n < 1 {
			return fmt.Errorf("bench config: client count %d is below 1", n)
		}
	}
	seen := map[string]bool{}
	for _, name := range c.Systems {
		if _, ok := specByName(name); !ok || seen[name] {
			return fmt.Errorf("bench config: unknown or repeated system %q; want some of %s", name, strings.Join(SystemNames(), ", "))
		}
		seen[name] = true
		if name == "fenced-bolt" && c.FencedBoltBin == "" {
			return errors.New("bench config: system fenced-bolt needs FencedBoltBin (-fenced-bolt-bin)")
		}
		if spec, _ := specByName(name); spec.zk {
			if err := ZooKeeperInstalled(c.ZooKeeperJar); err != nil {
				return fmt.Errorf("bench config: system %s: %w", name, err)
			}
		}
	}
	known := map[string]bool{memoryWorkload: true}
	for _, w := range workloads {
		known[w.name] = true
	}
	for _, name := range c.Workloads {
		if !known[name] {
			return fmt.Errorf("bench config: unknown workload %q; want some of %s", name, strings.Join(WorkloadNames(), ", "))
		}
	}
	return nil
}

func (c *Config) selected(name string) bool {
	if len(c.Workloads) == 0 {
		return true
	}
	for _, w := range c.Workloads {
		if w == name {
			return true
		}
	}
	return false
}

func pick[T any](quick bool, q, full T) T {
	if quick {
		return q
	}
	return full
}

var errNoBenchDir = errors.New("cannot find the bench module (go.mod of github.com/fencedio/fenced/bench) from the working directory; run from inside bench/ or set BenchDir")
