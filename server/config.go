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
	// NodeID names this node in the raft configuration. Default "node1".
	NodeID string

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
	// SnapshotThreshold is the number of log entries between snapshots.
	// Default 16384.
	SnapshotThreshold uint64

	// TLS turns on TLS for the API port (see TLSFiles): with a cert file
	// set, the port speaks only TLS. Off by default.
	TLS TLSFiles
	// AuthFile is the auth policy (LoadPolicy): bearer token hashes and the
	// rules that grant principals permissions on key prefixes. Setting it
	// turns authentication on: every request must then authenticate, and
	// whatever no rule grants is denied. Empty by default (no auth).
	AuthFile string
	// SigningKeyFile turns on token signing: every grant and renewal comes
	// with an Ed25519 signature of its token for its key, and the public
	// keys are served on /v1/keys (see signingFile). Empty by default.
	SigningKeyFile string

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
	setDefault(&c.RaftListen, "127.0.0.1:7421")
	setDefault(&c.NodeID, "node1")
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
	for name, v := range map[string]int64{
		"MaxWait": int64(c.MaxWait), "MaxBodyBytes": c.MaxBodyBytes, "MaxLeases": int64(c.MaxLeases),
		"MaxIdleKeys": int64(c.MaxIdleKeys), "ListLimit": int64(c.ListLimit), "WatchBuffer": int64(c.WatchBuffer),
		"WatchHistory": int64(c.WatchHistory),
	} {
		if v < 0 {
			errs = append(errs, fmt.Errorf("config: %s is negative", name))
		}
	}
	for name, addr := range map[string]string{"Listen": c.Listen, "RaftListen": c.RaftListen} {
		if _, _, err := net.SplitHostPort(addr); err != nil {
			errs = append(errs, fmt.Errorf("config: %s %q: %w", name, addr, err))
		}
	}
	errs = append(errs, c.TLS.Validate())
	return errors.Join(errs...)
}

func setDefault[T comparable](p *T, def T) {
	var zero T
	if *p == zero {
		*p = def
	}
}
