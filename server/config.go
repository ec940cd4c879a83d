package server

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"github.com/fencedio/fenced/lease"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Config configures a Server. The zero value of every field means its
// default; Validate fills the defaults in and checks the cross-field rules.
type Config struct {
	// DataDir holds the raft log, stable store and snapshots.
	// Default "./fenced-data".
	DataDir string
	// Listen is the address of the lease API, /metrics and /healthz.
	// Default "127.0.0.1:7420".
	Listen string
	// RaftListen is the address raft peers use. Default "127.0.0.1:7421".
	RaftListen string
	// RaftAdvertise is the address peers dial to reach this node, when it
	// is not RaftListen: behind NAT, a proxy or a port forward (etcd's
	// --initial-advertise-peer-urls). InitialCluster lists advertised
	// addresses. Default: this node's address in InitialCluster, or
	// RaftListen.
	RaftAdvertise string
	// NodeID names this node in the raft configuration. Default "node1".
	NodeID string
	// InitialCluster lists the members a new cluster starts with, this
	// node among them with RaftListen as its address; every member gets
	// the same list. Empty: a cluster of one. Ignored once the data
	// directory holds raft state. See cluster.go for the timing rules.
	// RaftListen defaults to this node's address in the list.
	InitialCluster []Peer
	// Join makes a node with no raft state wait to be added to a running
	// cluster (ClusterService.AddMember, fencectl member add) instead of
	// starting a cluster of one. Ignored once the data directory holds raft
	// state.
	Join bool

	// MinTTL and MaxTTL bound the TTL of a lease. Defaults 1s and 1h.
	MinTTL, MaxTTL time.Duration
	// MaxWait bounds waitMs of an acquisition. Default 10m.
	MaxWait time.Duration
	// MaxBodyBytes refuses larger requests. Default 64 KiB.
	MaxBodyBytes int64
	// MaxLeases refuses new acquisitions while this many leases are current.
	// Default 2,000,000.
	MaxLeases int
	// MaxIdleKeys bounds how many freed keys remember their last token
	// (lease.New). Every node must use the same value. Default 100,000.
	MaxIdleKeys int
	// ListLimit is the most leases one List returns, and the default when a
	// request gives no limit. Default 10,000.
	ListLimit int
	// WatchBuffer is the number of events a watcher may fall behind before
	// it is sent a RESYNC. Default 1024.
	WatchBuffer int
	// WatchHistory is the number of past events kept to resume a watch.
	// Default 4096.
	WatchHistory int

	// HeartbeatTimeout is raft's heartbeat and election timeout. Lower
	// values fail over faster and start a single node sooner.
	// Default 500ms.
	HeartbeatTimeout time.Duration
	// SnapshotThreshold is the number of log entries between snapshots;
	// as many entries are kept in the log after one, for peers that fall
	// behind. Default 16384.
	SnapshotThreshold uint64
	// SnapshotInterval is how often the log is compared with
	// SnapshotThreshold (raft's own default is two minutes: at thousands of
	// entries a second the log grew by hundreds of MB between looks).
	// Tests set both low so that snapshots, restores and log truncation
	// happen within seconds. Default 10s; at least 5ms.
	SnapshotInterval time.Duration

	// Profiling serves net/http/pprof under /debug/pprof/ on the API port.
	// Off by default: profiles expose internals and cost CPU while taken.
	Profiling bool

	// Logger receives one record per lease transition. Default slog.Default().
	Logger *slog.Logger
	// RaftLog receives raft's own log at warning level and above.
	// Default io.Discard.
	RaftLog io.Writer
	// Registerer receives the server's metrics. Default: a new registry
	// with the Go runtime and process collectors, served on /metrics.
	Registerer prometheus.Registerer
	// Gatherer is what /metrics serves. Default: the registry above.
	Gatherer prometheus.Gatherer

	// wrapLogStore, if set, wraps the raft log store: tests use it to make
	// writes fail.
	wrapLogStore func(raft.LogStore) raft.LogStore
}

// Validate fills in defaults and checks the configuration.
func (c *Config) Validate() error {
	setDefault(&c.DataDir, "fenced-data")
	setDefault(&c.Listen, "127.0.0.1:7420")
	setDefault(&c.NodeID, "node1")
	if len(c.InitialCluster) == 0 || c.advertisedRaftAddress() == "" {
		setDefault(&c.RaftListen, "127.0.0.1:7421")
	}
	setDefault(&c.MinTTL, time.Second)
	setDefault(&c.MaxTTL, time.Hour)
	setDefault(&c.MaxWait, 10*time.Minute)
	setDefault(&c.MaxBodyBytes, 64<<10)
	setDefault(&c.MaxLeases, 2_000_000)
	setDefault(&c.MaxIdleKeys, lease.DefaultMaxIdleKeys)
	setDefault(&c.ListLimit, 10_000)
	setDefault(&c.WatchBuffer, 1024)
	setDefault(&c.WatchHistory, 4096)
	setDefault(&c.HeartbeatTimeout, 500*time.Millisecond)
	setDefault(&c.SnapshotThreshold, 16384)
	setDefault(&c.SnapshotInterval, 10*time.Second)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.RaftLog == nil {
		c.RaftLog = io.Discard
	}
	if c.Registerer == nil && c.Gatherer == nil {
		reg := prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		c.Registerer, c.Gatherer = reg, reg
	}
	if c.Gatherer == nil {
		c.Gatherer = prometheus.DefaultGatherer
	}
	if c.Registerer == nil {
		return errors.New("config: Gatherer set without Registerer")
	}

	var errs []error
	if c.MinTTL < time.Millisecond {
		errs = append(errs, fmt.Errorf("config: MinTTL %v is below 1ms", c.MinTTL))
	}
	if c.MaxTTL < c.MinTTL {
		errs = append(errs, fmt.Errorf("config: MaxTTL %v is below MinTTL %v", c.MaxTTL, c.MinTTL))
	}
	if c.MinTTL <= c.HeartbeatTimeout/2 {
		// A lease must outlive a leadership check, or renewals cannot keep it.
		errs = append(errs, fmt.Errorf("config: MinTTL %v must exceed half the HeartbeatTimeout %v", c.MinTTL, c.HeartbeatTimeout))
	}
	if err := c.validateCluster(); err != nil {
		errs = append(errs, err)
	}
	if c.SnapshotInterval < 5*time.Millisecond {
		errs = append(errs, fmt.Errorf("config: SnapshotInterval %v is below 5ms", c.SnapshotInterval))
	}
	for name, v := range map[string]int64{
		"MaxWait": int64(c.MaxWait), "MaxBodyBytes": c.MaxBodyBytes, "MaxLeases": int64(c.MaxLeases),
		"MaxIdleKeys": int64(c.MaxIdleKeys), "ListLimit": int64(c.ListLimit), "WatchBuffer": int64(c.WatchBuffer),
		"WatchHistory": int64(c.WatchHistory),
	} {
		if v < 0 {
			errs = append(errs, fmt.Errorf("config: %s is negative", name))
		}
	}
	addrs := map[string]string{"Listen": c.Listen, "RaftListen": c.RaftListen}
	if c.RaftAdvertise != "" {
		addrs["RaftAdvertise"] = c.RaftAdvertise
	}
	for name, addr := range addrs {
		if _, _, err := net.SplitHostPort(addr); err != nil {
			errs = append(errs, fmt.Errorf("config: %s %q: %w", name, addr, err))
		}
	}
	return errors.Join(errs...)
}

func setDefault[T comparable](p *T, def T) {
	var zero T
	if *p == zero {
		*p = def
	}
}
