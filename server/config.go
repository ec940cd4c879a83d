package server

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"runtime/debug"
	"time"

	"github.com/fencedio/fenced/internal/httplimit"
	"github.com/fencedio/fenced/lease"
	"github.com/fencedio/fenced/server/internal/logs"
	"github.com/fencedio/fenced/server/internal/membership"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Config configures a Server. The zero value of every field means its
// default; New applies the defaults to its copy, and Validate checks the
// configuration as New would use it, without changing it.
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
	// AdvertiseClientURL is the base URL clients reach this node's API at
	// (etcd's --advertise-client-urls, one URL): the leader records every
	// member's in the log, so every node lists them (ListMembers, /v1/role)
	// and clients can sync their endpoints from them. Default: the address
	// the API listens on (https with TLS), or none when that is every
	// address of the machine (0.0.0.0, [::]).
	AdvertiseClientURL string
	// NodeID names this node in the raft configuration. Default "node1".
	NodeID string
	// InitialCluster lists the members a new cluster starts with, this
	// node among them with RaftListen as its address; every member gets
	// the same list. Empty: a cluster of one. Ignored once the data
	// directory holds raft state. See cluster.go for the timing rules.
	// RaftListen defaults to this node's address in the list.
	InitialCluster []Peer
	// InitialClusterState is etcd's --initial-cluster-state: ClusterNew
	// or ClusterExisting. It matters only while the data directory holds
	// no raft state. ClusterNew forms a new cluster with the other members
	// of InitialCluster (or a cluster of one) once each of them has
	// answered, and refuses to start (peers.ErrMemberBootstrapped) when one
	// already belongs to a cluster that counts this member with another
	// data directory. ClusterExisting waits to be added to a running
	// cluster, as Join does. A member that waits to be added does not vote
	// until it is (internal/peers/identity.go). Default ClusterNew.
	InitialClusterState string
	// Join makes a node with no raft state wait to be added to a running
	// cluster (ClusterService.AddMember, fencectl member add) instead of
	// starting a cluster of one: ClusterExisting without an initial
	// cluster. Ignored once the data directory holds raft state.
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
	// MaxLeaseBytes refuses a new acquisition whose lease would bring the
	// current leases' cost past it: each lease costs its key's and its
	// owner's lengths plus lease.LeaseOverhead (lease.Cost), what a node
	// was measured to hold for it. MaxLeases bounds the count; this bounds
	// the memory, whatever the keys' and owners' sizes. Default: a quarter
	// of the memory available to the process (defaultMaxLeaseBytes): the
	// Go heap grows to about twice its live bytes between collections.
	// Like MaxLeases it is checked by the leader, on the state it has
	// applied: give every member the same.
	MaxLeaseBytes int64
	// MaxLeasesPerOwner refuses new acquisitions by an owner that holds
	// this many leases, and MaxWaitersPerOwner acquisitions that would make
	// an owner wait in more than this many lines at once; both answer
	// resource_exhausted naming the quota. Without auth they count per
	// owner a request names; with auth, per principal as well (quota.go).
	// Defaults 100,000 and 10,000: far above what one service
	// instance needs, low enough that one runaway client cannot fill
	// MaxLeases alone.
	MaxLeasesPerOwner, MaxWaitersPerOwner int
	// MaxWaiters caps the acquisitions waiting in line on this server, in
	// all; more are refused with resource_exhausted naming max-waiters.
	// A waiting acquisition costs about 40 KiB of memory (waiterCost: its
	// handler goroutine, its HTTP/2 stream and its timer). Default: enough for an
	// eighth of the memory available (availableMemory: the machine's, its
	// cgroup's limit or GOMEMLIMIT, the lowest), at least 1,000
	// (defaultMaxWaiters).
	MaxWaiters int
	// MaxWaitersPerClient and MaxLeasesPerClient are the share of
	// waiting acquisitions and of current leases one client IP address may
	// take, whatever owners it names (clientlimits.go); more are refused
	// with resource_exhausted naming the limit. Defaults a tenth of
	// MaxWaiters and of MaxLeases, at least 1,000 (all of it when that is
	// less): one client cannot take the service from the others alone.
	// Clients behind one NAT or proxy share them.
	MaxWaitersPerClient, MaxLeasesPerClient int
	// MaxCallsPerClient caps the unary API calls from one client IP
	// address that the server works on at once (clientlimits.go); a call
	// beyond it is refused with resource_exhausted naming
	// max-calls-per-client, before its body is read. Waiting in line for a
	// key and streams do not count. Default 256: a worker host running
	// 256 clients, each waiting for its answer, is not refused.
	MaxCallsPerClient int
	// ClientNetworkV4 and ClientNetworkV6 are the prefix lengths that
	// group client addresses into networks: a client that sends from many
	// addresses of its network (a /24, an IPv6 /64) shares its network's
	// calls and turns. Defaults 24 and 64; 32 and 128 make each address
	// a network of its own.
	ClientNetworkV4, ClientNetworkV6 int
	// NetworkShare sizes the shares of a client network: on top of each
	// share of one client address (MaxConnsPerClient, MaxCallsPerClient, MaxWaitersPerClient,
	// MaxLeasesPerClient, MaxWatchersPerClient, MaxSessionsPerClient,
	// MaxEventSubscribersPerClient), a network may take NetworkShare
	// times as much (no more than the whole); beyond it calls are refused
	// with resource_exhausted naming the share's flag with -per-network
	// (max-calls-per-network...). Default 4: a network of many addresses
	// gets four addresses' worth, however many it sends from.
	NetworkShare int
	// MaxCallsInProgress is how many unary API calls the server works on
	// at once, from all clients. Calls beyond it wait in one line per
	// client network, and each call that ends lets in the head of the line
	// whose network has held the server's calls for the least time
	// (weighted-fair admission, internal/admission's FairGate): a network
	// that floods the server gets its turn as often as one that sends one
	// call at a time, not as often as it sends. A call takes its place
	// once its body has arrived; waiting in line for a key does not hold
	// one. Default 64.
	MaxCallsInProgress int
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
	// MaxWatchers caps open Watch streams on this server, and
	// MaxWatchersPerClient those from one client IP address; more are
	// refused with resource_exhausted. Defaults 10,000 and 1,000.
	MaxWatchers, MaxWatchersPerClient int
	// MaxSessions caps open Session streams on this server, and
	// MaxSessionsPerClient those from one client IP address; more are
	// refused with resource_exhausted. Each call a stream carries is
	// admitted as a unary call is (MaxCallsPerClient, MaxCallsInProgress
	// and the quotas). Defaults 10,000 and 256.
	MaxSessions, MaxSessionsPerClient int
	// MaxEventSubscribers caps open dashboard streams (/v1/events), and
	// MaxEventSubscribersPerClient those from one client IP address; more
	// are refused with 429. Defaults 1,000 and 100.
	MaxEventSubscribers, MaxEventSubscribersPerClient int
	// StreamWriteTimeout bounds every send on a stream (Watch, /v1/events):
	// a subscriber that stops reading for this long is cut off. A Watch
	// send may be cut after 3/4 of it already (the deadline is moved only
	// when less than that is left). Default 10s.
	StreamWriteTimeout time.Duration
	// StreamUnackedBytes bounds the bytes a stream's connection may hold
	// sent but not acknowledged by its client (Linux; elsewhere only
	// StreamWriteTimeout holds). A client that does not read fills its
	// receive buffer, then this server's send buffer, which the kernel
	// would otherwise grow to megabytes per connection (net.ipv4.tcp_wmem)
	// so that writes never block and StreamWriteTimeout never cuts it. A
	// Watch past the bound is sent RESYNC and ended, a dashboard stream
	// "resync"; the connection's send buffer is set to this size (the
	// kernel doubles it), so that the last message fits. Over HTTP/2 the
	// connection's streams share the bound, and a stream whose client
	// reads the connection but grants no window blocks and is cut by
	// StreamWriteTimeout. Default 256 KiB.
	StreamUnackedBytes int
	// ReadShare is the share of time each read slot (Gets, Lists,
	// dashboard snapshots; GOMAXPROCS/2 slots, at least one) may spend
	// reading while log writes are waiting: a slot whose read took d rests
	// d*(1-ReadShare)/ReadShare before its next read, so that readers slow
	// down rather than acquisitions. 1 turns the rest off. Default 0.1.
	ReadShare float64
	// FanoutShare is the same for fan-out: sending events to watchers and
	// dashboards, which take GOMAXPROCS/2 slots (at least one) in turn.
	// Under overload, the watchers the server cannot serve within it fall
	// behind, and those more than WatchBuffer events behind get RESYNC:
	// acquisitions keep their pace, the watchers furthest behind are shed.
	// 1 turns the rest off. Default 0.1: every event delivered costs its
	// subscriber CPU as well, often on the same machines as the service's
	// clients, and 0.25 still left 2,000 watchers of every transition
	// holding acquisitions to a third of their quiet rate (bench/README.md).
	FanoutShare float64

	// ApplyStallTimeout is how long log writes may be pending without any
	// being applied before /healthz answers 503 "apply path stalled".
	// Default 10s.
	ApplyStallTimeout time.Duration

	// MaxHeaderBytes bounds request headers; larger ones get 431. Over
	// HTTP/2 it is also the advertised header list size. Default 64 KiB.
	MaxHeaderBytes int
	// ReadHeaderTimeout bounds the time to receive request headers.
	// Default 10s.
	ReadHeaderTimeout time.Duration
	// IdleTimeout closes keep-alive connections idle this long.
	// Default 60s (httplimit.DefaultIdleTimeout): below nginx's 75s, so
	// that idle connections do not hold their slots for minutes, and long
	// enough that a client's pooled connections outlive its pauses.
	IdleTimeout time.Duration
	// BodyReadTimeout bounds the time to receive the body of a unary call;
	// a slower body fails. Streams are bounded by StreamWriteTimeout
	// instead. Default 30s.
	BodyReadTimeout time.Duration
	// MaxConns caps open API connections; more wait to be accepted.
	// Default: three quarters of the file descriptor limit (RLIMIT_NOFILE),
	// at least 64, so that the raft log and peers keep descriptors.
	MaxConns int
	// MaxConnsPerClient caps the open API connections from one client IP
	// address: a connection beyond it is closed as soon as it is accepted,
	// unanswered. Default a tenth of MaxConns, at least 64 (at most
	// MaxConns).
	MaxConnsPerClient int

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
	// TrailingLogs is how many entries a snapshot leaves in the log (log
	// compaction removes the rest): a follower that falls fewer entries
	// behind catches up from the log, one further behind, or a new one,
	// from the snapshot. Default SnapshotThreshold.
	TrailingLogs uint64

	// TLS turns on TLS for the API port (see TLSFiles): with a cert file
	// set, the port speaks only TLS. Off by default.
	TLS TLSFiles
	// PeerTLS turns on mutual TLS for the peer port, raft and forwarded
	// calls alike (internal/security/peertls.go): CertFile, KeyFile and TrustedCAFile are all
	// needed, ClientCertAuth is implied. Off by default.
	PeerTLS TLSFiles
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
	// LogOutput, when it is the writer under Logger's handler, lets the
	// server write the records of one applied batch of commits together
	// (see LogWriter). Optional: without it every record is its own write.
	LogOutput *LogWriter
	// RaftLogger receives raft's own log (and raft-wal's) at warning level
	// and above, each record with a module attribute ("raft", "raft.wal",
	// ...). Give it Logger, or a logger over the same handler, to have one
	// format for every line. Default: discarded.
	RaftLogger *slog.Logger
	// Registerer receives the server's metrics. Default: a new registry
	// with the Go runtime and process collectors, served on /metrics.
	Registerer prometheus.Registerer
	// Gatherer is what /metrics serves. Default: the registry above.
	Gatherer prometheus.Gatherer

	// wrapLogStore, if set, wraps the raft log store: tests use it to make
	// writes fail.
	wrapLogStore func(raft.LogStore) raft.LogStore
	// applyLost, if set, is asked about each entry as it is written: an
	// error makes the write answer that error at once while the entry is
	// still written and may commit, as when a leader steps down with
	// entries in flight. Tests use it to lose an entry's outcome.
	applyLost func(lease.Command) error
	// beforeApply, if set, runs before the state machine applies each
	// batch of entries: tests use it to hold a node in its replay.
	beforeApply func()
}

// The defaults of Config's fields, documented on each field; cmd/fenced's
// flags take theirs from here. Fields whose default depends on the machine
// or on other fields (MaxWaiters, MaxConns, the per-client shares,
// TrailingLogs, RaftListen in a cluster) have none here.
const (
	DefaultDataDir    = "fenced-data"
	DefaultListen     = "127.0.0.1:7420"
	DefaultRaftListen = "127.0.0.1:7421"
	DefaultNodeID     = "node1"

	DefaultMinTTL                       = time.Second
	DefaultMaxTTL                       = time.Hour
	DefaultMaxWait                      = 10 * time.Minute
	DefaultMaxBodyBytes                 = 64 << 10
	DefaultMaxLeases                    = 2_000_000
	DefaultMaxLeasesPerOwner            = 100_000
	DefaultMaxWaitersPerOwner           = 10_000
	DefaultMaxCallsPerClient            = 256
	DefaultNetworkShare                 = 4
	DefaultMaxCallsInProgress           = 64
	DefaultClientNetworkV4              = 24
	DefaultClientNetworkV6              = 64
	DefaultMaxIdleKeys                  = lease.DefaultMaxIdleKeys
	DefaultListLimit                    = 10_000
	DefaultWatchBuffer                  = 1024
	DefaultWatchHistory                 = 4096
	DefaultMaxWatchers                  = 10_000
	DefaultMaxWatchersPerClient         = 1_000
	DefaultMaxSessions                  = 10_000
	DefaultMaxSessionsPerClient         = 256
	DefaultMaxEventSubscribers          = 1_000
	DefaultMaxEventSubscribersPerClient = 100
	DefaultStreamWriteTimeout           = 10 * time.Second
	DefaultStreamUnackedBytes           = 256 << 10
	DefaultReadShare                    = 0.1
	DefaultFanoutShare                  = 0.1
	DefaultApplyStallTimeout            = 10 * time.Second

	DefaultMaxHeaderBytes    = httplimit.DefaultMaxHeaderBytes
	DefaultReadHeaderTimeout = httplimit.DefaultReadHeaderTimeout
	DefaultIdleTimeout       = httplimit.DefaultIdleTimeout
	DefaultBodyReadTimeout   = httplimit.DefaultBodyTimeout

	DefaultHeartbeatTimeout  = 500 * time.Millisecond
	DefaultSnapshotThreshold = 16384
	DefaultSnapshotInterval  = 10 * time.Second
)

// The values of Config.InitialClusterState.
const (
	ClusterNew      = "new"
	ClusterExisting = "existing"
)

// WithDefaults returns c as New would use it: each zero field set to its
// default.
func (c Config) WithDefaults() Config {
	setDefault(&c.DataDir, DefaultDataDir)
	setDefault(&c.Listen, DefaultListen)
	setDefault(&c.NodeID, DefaultNodeID)
	setDefault(&c.InitialClusterState, ClusterNew)
	// In a cluster the default is this node's address in the list.
	if self := c.advertisedRaftAddress(); len(c.InitialCluster) > 0 && self != "" {
		setDefault(&c.RaftListen, self)
	}
	setDefault(&c.RaftListen, DefaultRaftListen)
	setDefault(&c.MinTTL, DefaultMinTTL)
	setDefault(&c.MaxTTL, DefaultMaxTTL)
	setDefault(&c.MaxWait, DefaultMaxWait)
	setDefault(&c.MaxBodyBytes, DefaultMaxBodyBytes)
	setDefault(&c.MaxLeases, DefaultMaxLeases)
	setDefault(&c.MaxLeaseBytes, defaultMaxLeaseBytes())
	setDefault(&c.MaxLeasesPerOwner, DefaultMaxLeasesPerOwner)
	setDefault(&c.MaxWaitersPerOwner, DefaultMaxWaitersPerOwner)
	setDefault(&c.MaxWaiters, defaultMaxWaiters())
	setDefault(&c.MaxWaitersPerClient, clientShare(c.MaxWaiters))
	setDefault(&c.MaxLeasesPerClient, clientShare(c.MaxLeases))
	setDefault(&c.MaxCallsPerClient, DefaultMaxCallsPerClient)
	setDefault(&c.NetworkShare, DefaultNetworkShare)
	setDefault(&c.MaxCallsInProgress, DefaultMaxCallsInProgress)
	setDefault(&c.ClientNetworkV4, DefaultClientNetworkV4)
	setDefault(&c.ClientNetworkV6, DefaultClientNetworkV6)
	setDefault(&c.MaxIdleKeys, DefaultMaxIdleKeys)
	setDefault(&c.ListLimit, DefaultListLimit)
	setDefault(&c.WatchBuffer, DefaultWatchBuffer)
	setDefault(&c.WatchHistory, DefaultWatchHistory)
	setDefault(&c.MaxWatchers, DefaultMaxWatchers)
	setDefault(&c.MaxWatchersPerClient, DefaultMaxWatchersPerClient)
	setDefault(&c.MaxSessions, DefaultMaxSessions)
	setDefault(&c.MaxSessionsPerClient, DefaultMaxSessionsPerClient)
	setDefault(&c.MaxEventSubscribers, DefaultMaxEventSubscribers)
	setDefault(&c.MaxEventSubscribersPerClient, DefaultMaxEventSubscribersPerClient)
	setDefault(&c.StreamWriteTimeout, DefaultStreamWriteTimeout)
	setDefault(&c.StreamUnackedBytes, DefaultStreamUnackedBytes)
	setDefault(&c.ReadShare, DefaultReadShare)
	setDefault(&c.FanoutShare, DefaultFanoutShare)
	setDefault(&c.HeartbeatTimeout, DefaultHeartbeatTimeout)
	setDefault(&c.ApplyStallTimeout, DefaultApplyStallTimeout)
	limits := c.httpLimits().WithDefaults()
	c.MaxHeaderBytes, c.ReadHeaderTimeout, c.IdleTimeout = limits.MaxHeaderBytes, limits.ReadHeaderTimeout, limits.IdleTimeout
	c.BodyReadTimeout, c.MaxConns, c.MaxConnsPerClient = limits.BodyTimeout, limits.MaxConns, limits.MaxConnsPerClient
	setDefault(&c.SnapshotThreshold, DefaultSnapshotThreshold)
	setDefault(&c.SnapshotInterval, DefaultSnapshotInterval)
	setDefault(&c.TrailingLogs, c.SnapshotThreshold)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.RaftLogger == nil {
		c.RaftLogger = slog.New(slog.DiscardHandler)
	}
	if c.Registerer == nil && c.Gatherer == nil {
		reg := prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		c.Registerer, c.Gatherer = reg, reg
	}
	if c.Gatherer == nil {
		c.Gatherer = prometheus.DefaultGatherer
	}
	return c
}

// Validate checks the configuration as New would use it, zero fields
// replaced by their defaults. It does not change c.
func (c Config) Validate() error {
	c = c.WithDefaults()
	if c.Registerer == nil {
		return errors.New("config: Gatherer set without Registerer")
	}

	errs := []error{c.httpLimits().Validate()}
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
	if c.SnapshotInterval < 5*time.Millisecond {
		errs = append(errs, fmt.Errorf("config: SnapshotInterval %v is below 5ms", c.SnapshotInterval))
	}
	if c.InitialClusterState != ClusterNew && c.InitialClusterState != ClusterExisting {
		errs = append(errs, fmt.Errorf("config: InitialClusterState %q is neither %q nor %q", c.InitialClusterState, ClusterNew, ClusterExisting))
	}
	if err := c.validateCluster(); err != nil {
		errs = append(errs, err)
	}
	for name, v := range map[string]int64{
		"MaxWait": int64(c.MaxWait), "MaxBodyBytes": c.MaxBodyBytes, "MaxLeases": int64(c.MaxLeases),
		"MaxLeaseBytes": c.MaxLeaseBytes, "MaxIdleKeys": int64(c.MaxIdleKeys), "ListLimit": int64(c.ListLimit), "WatchBuffer": int64(c.WatchBuffer),
		"WatchHistory": int64(c.WatchHistory), "ApplyStallTimeout": int64(c.ApplyStallTimeout),
		"MaxWatchers": int64(c.MaxWatchers), "MaxWatchersPerClient": int64(c.MaxWatchersPerClient),
		"MaxSessions": int64(c.MaxSessions), "MaxSessionsPerClient": int64(c.MaxSessionsPerClient),
		"MaxEventSubscribers": int64(c.MaxEventSubscribers), "MaxEventSubscribersPerClient": int64(c.MaxEventSubscribersPerClient),
		"StreamWriteTimeout": int64(c.StreamWriteTimeout), "StreamUnackedBytes": int64(c.StreamUnackedBytes),
		"MaxLeasesPerOwner": int64(c.MaxLeasesPerOwner), "MaxWaitersPerOwner": int64(c.MaxWaitersPerOwner),
		"MaxWaiters": int64(c.MaxWaiters), "MaxWaitersPerClient": int64(c.MaxWaitersPerClient),
		"MaxLeasesPerClient": int64(c.MaxLeasesPerClient), "MaxCallsPerClient": int64(c.MaxCallsPerClient),
		"NetworkShare": int64(c.NetworkShare), "MaxCallsInProgress": int64(c.MaxCallsInProgress),
	} {
		if v < 0 {
			errs = append(errs, fmt.Errorf("config: %s is negative", name))
		}
	}
	if c.ClientNetworkV4 < 0 || c.ClientNetworkV4 > 32 {
		errs = append(errs, fmt.Errorf("config: ClientNetworkV4 %d is not a prefix length of 1 to 32", c.ClientNetworkV4))
	}
	if c.ClientNetworkV6 < 0 || c.ClientNetworkV6 > 128 {
		errs = append(errs, fmt.Errorf("config: ClientNetworkV6 %d is not a prefix length of 1 to 128", c.ClientNetworkV6))
	}
	for name, v := range map[string]float64{"ReadShare": c.ReadShare, "FanoutShare": c.FanoutShare} {
		if v <= 0 || v > 1 {
			errs = append(errs, fmt.Errorf("config: %s %v is not in (0, 1]", name, v))
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
	if c.AdvertiseClientURL != "" {
		if err := membership.ValidateClientURL(c.AdvertiseClientURL); err != nil {
			errs = append(errs, fmt.Errorf("config: AdvertiseClientURL: %w", err))
		}
	}
	errs = append(errs, c.TLS.Validate(), c.PeerTLS.ValidatePeer())
	return errors.Join(errs...)
}

// clientShare is the default share of total one client address may take:
// a tenth, at least 1,000 (total when that is less).
func clientShare(total int) int { return max(total/10, min(total, 1000)) }

// networkShare is the share of a client network, given that of one of its
// addresses and the whole.
func (c Config) networkShare(perClient, total int) int {
	return min(perClient*c.NetworkShare, total)
}

// httpLimits are the limits of the API's HTTP server.
func (c Config) httpLimits() httplimit.Limits {
	return httplimit.Limits{MaxHeaderBytes: c.MaxHeaderBytes, ReadHeaderTimeout: c.ReadHeaderTimeout,
		IdleTimeout: c.IdleTimeout, BodyTimeout: c.BodyReadTimeout, MaxConns: c.MaxConns, MaxConnsPerClient: c.MaxConnsPerClient}
}

// waiterCost is the memory one waiting acquisition holds over HTTP/2: its
// handler's goroutine and stack, the stream's buffers and state, and its
// timers. TestAbuseProbe in cmd/fenced measures 25 to 32 KiB of resident
// memory per waiter; the rest is room for the garbage collector's headroom.
const waiterCost = 40 << 10

// defaultMaxWaiters is Config.MaxWaiters' default: as many waiters as fit
// in an eighth of availableMemory, at least 1,000.
func defaultMaxWaiters() int {
	mem := availableMemory()
	if mem == 0 {
		return 10_000
	}
	return int(max(1_000, min(mem/8/waiterCost, 1<<30)))
}

// defaultMaxLeaseBytes is Config.MaxLeaseBytes' default: a quarter of
// availableMemory, 1 GiB when that is unknown.
func defaultMaxLeaseBytes() int64 {
	mem := availableMemory()
	if mem == 0 {
		return 1 << 30
	}
	return int64(min(mem/4, math.MaxInt64))
}

// availableMemory is the memory this process may use: the lowest of the
// machine's, its control group's limit (cgroupMemoryLimit) and
// GOMEMLIMIT, 0 when none is known.
func availableMemory() uint64 {
	mem := physicalMemory()
	for _, lim := range []uint64{cgroupMemoryLimit(), uint64(max(0, debug.SetMemoryLimit(-1)))} {
		if lim > 0 && lim < math.MaxInt64 && (mem == 0 || lim < mem) {
			mem = lim
		}
	}
	return mem
}

func setDefault[T comparable](p *T, def T) {
	var zero T
	if *p == zero {
		*p = def
	}
}

// LogWriter lets the node write the transition records of one applied
// batch in one write; see Config.LogOutput.
type LogWriter = logs.Writer

// NewLogWriter returns a LogWriter that writes to w.
func NewLogWriter(w io.Writer) *LogWriter { return logs.NewWriter(w) }
