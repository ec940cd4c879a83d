package torture

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/fencedio/fenced/internal/failpoint"
	"github.com/fencedio/fenced/internal/torture/proc"
)

// Config configures a torture run. The zero value of every field means its
// default; Validate fills the defaults in and checks the cross-field rules.
type Config struct {
	// Duration is how long the workers run. Checking comes after it.
	// Default 60s.
	Duration time.Duration
	// Workers is the number of worker processes. Default 4.
	Workers int
	// Keys is the number of lease keys the workers contend for. Default 3.
	Keys int
	// KeyPrefix starts every key of the run. Default "torture/<run id>/",
	// so that runs against a long-lived deployment never share keys.
	KeyPrefix string
	// TTL is the lease TTL the workers ask for. Default 1s.
	TTL time.Duration
	// Wait is how long an acquisition waits in line. Default 2×TTL.
	Wait time.Duration
	// TryProbability is the chance that an acquisition does not wait at
	// all (a held key is refused at once, naming its holder). Default 0.2;
	// negative: always wait.
	TryProbability float64
	// WritesMin and WritesMax bound the writes made under one lease (each
	// is a store PUT and, with PostgreSQL, a SQL transaction). Defaults 2
	// and 5.
	WritesMin, WritesMax int
	// ThinkMax bounds the random think time before each write. Default
	// TTL/5.
	ThinkMax time.Duration
	// LongHoldShare is the share of leases held for about 2×TTL (the
	// writes spread over up to 4×TTL), so that the client renews them
	// several times and a renewal the server does not honour shows.
	// Default 0.25; negative disables.
	LongHoldShare float64
	// GetProbability is the chance that a worker reads a random key before
	// an acquisition. Default 0.5; negative disables reads.
	GetProbability float64
	// AbandonProbability is the chance that a worker drops a lease without
	// releasing it, leaving it to expire. Default 0.1; negative disables.
	AbandonProbability float64

	// PauseProbability is the chance that the harness freezes (SIGSTOP) a
	// worker while it holds a lease. Default 0.3; negative disables pauses.
	PauseProbability float64
	// PauseMin and PauseMax bound a freeze; both must exceed TTL, so that
	// the lease expires while its holder is frozen. Defaults 1.5×TTL and
	// 3×TTL.
	PauseMin, PauseMax time.Duration
	// DelayShare is the share of store writes sent through the delaying
	// proxy. Default 0.1; negative disables the proxy.
	DelayShare float64
	// SequenceShare is the share of direct store writes, SQL writes and
	// Redis writes that carry the lease's next sequence
	// (fence.WithSequence), so that a copy of one is refused as a
	// duplicate; the checker "sequenced-writes-at-most-once" audits them.
	// Default 0.3; negative disables.
	SequenceShare float64
	// LostAnswerShare is the share of answers to sequenced writes that
	// the workers throw away unread, as if the connection had broken after
	// the resource acted: the outcome is unknown, and the worker resends
	// the write with the same token and sequence (as it does after a
	// timeout or a store crash), which the guard must refuse as a
	// duplicate if the first copy was applied. Default 0.1; negative
	// disables.
	LostAnswerShare float64
	// DelayMin and DelayMax bound how long the proxy holds a request; both
	// must exceed TTL. Defaults 1.5×TTL and 3×TTL.
	DelayMin, DelayMax time.Duration

	// CrashInterval is the mean time between crashes (kill -9) of a node;
	// each gap is uniform in [CrashInterval/2, 3×CrashInterval/2]. Lower it
	// for a higher kill rate (fencectl torture --crash-interval). Default
	// 8s.
	CrashInterval time.Duration
	// AfterAckShare is the share of crashes that land within microseconds
	// after a worker recorded an acknowledged grant or release (two thirds
	// of them) or renewal. A third of the other crashes are aimed a few
	// milliseconds after an acquisition starts or a key is freed. Default
	// 0.5; negative: none.
	AfterAckShare float64
	// SnapshotBeforeCrash is the chance that the harness makes a local node
	// take a snapshot just before it kills it (except right after an
	// acknowledgement), so that the restart restores a fresh snapshot.
	// Default 0.3; negative disables.
	SnapshotBeforeCrash float64
	// NoCrashes disables node crashes.
	NoCrashes bool
	// DownMin and DownMax bound how long a crashed node stays down.
	// Defaults 100ms and 1s.
	DownMin, DownMax time.Duration
	// StoreCrashInterval, if set, also crashes the reference store (when
	// the harness runs it) with this mean interval, to test that every
	// acknowledged write survives. Default 0: the store is not crashed.
	StoreCrashInterval time.Duration
	// LoseUnsynced makes every kill of a local node and of the harness's
	// store a simulated power loss: what the process wrote to its raft log
	// or bbolt files after the last fsync or commit is lost
	// (failpoint.LoseUnsyncedEnvVar). Command must be built with the
	// fenced_failpoints tag.
	LoseUnsynced bool

	// NoFencing runs the negative control: the store accepts stale tokens
	// (store.Config.NoFencing) and SQL writes skip the guard. The checkers
	// must then report stale overwrites.
	NoFencing bool

	// Endpoint is the lease API of a fenced deployment to test instead of
	// nodes started by the harness. Default "": start one local node.
	Endpoint string
	// NodeKillCommand and NodeStartCommand, run with sh -c, crash and
	// restart the external node at Endpoint. Without both, an external
	// node is not crashed.
	NodeKillCommand, NodeStartCommand string
	// Nodes is the number of local nodes: 1, or a cluster of 3 or 5. A
	// cluster's nodes listen on 127.0.0.11, .12, ... with a fault-injecting
	// proxy in front of every raft peer port, and the workers fail over
	// between all of them. Its faults replace the crashes of a single
	// node: see ClusterFaultStats. Default 1.
	Nodes int
	// ClusterFaultInterval is the mean gap between two cluster faults
	// (uniform in [½, 1½]×), after the cluster is whole again from the
	// last one. Default 3s.
	ClusterFaultInterval time.Duration
	// ClusterFaults restricts a cluster run to these kinds of faults
	// (ClusterFaultKinds). Default: all of them but disk-loss, which
	// leaves the cluster unavailable for seconds each time,
	// leader-disk-stall, and the operator faults but foreign-cluster
	// (operatorByNameOnly).
	ClusterFaults []string
	// NodeMinTTL is the local node's --min-ttl. Default min(TTL, 1s).
	NodeMinTTL time.Duration
	// Failpoints names the mutants (internal/failpoint) switched on in the
	// local node, the harness's store and the Go workers (whose SQL guard
	// is the PostgreSQL side), through FENCED_FAILPOINTS. Command must then be built
	// with the fenced_failpoints tag; the node refuses to start otherwise.
	// A run with a mutant must report violations. Default: none.
	Failpoints []string
	// NodeSnapshotThreshold and NodeSnapshotInterval are the local node's
	// --snapshot-threshold and --snapshot-interval. They are low so that
	// every run takes snapshots, restores them and truncates the log.
	// Defaults 8 entries and 200ms.
	NodeSnapshotThreshold uint64
	NodeSnapshotInterval  time.Duration
	// NodeHeartbeatTimeout is the local nodes' raft heartbeat and election
	// timeout. Default: TTL/4 in a cluster, where it must be at most TTL/4
	// so that a failover ends well within a lease and a new leader's early
	// expiry shows before the holder's own deadline; the server's default
	// for a single node.
	NodeHeartbeatTimeout time.Duration
	// FollowerReadShare is the share of a cluster's reads (Get) that a
	// worker sends to a node picked at random rather than to the one its
	// client prefers, so that followers answer reads (by forwarding them to
	// the leader). Default 0.5; negative disables.
	FollowerReadShare float64

	// StoreURL is the base URL of a reference store (or of a resource with
	// the same HTTP contract) to test instead of one started by the
	// harness. Default "": start one.
	StoreURL string
	// PostgresDSN, if set, adds a fenced SQL write (fencesql) after each
	// store write, in tables created for the run. Default "": no SQL.
	PostgresDSN string
	// RedisAddr (host:port), if set, adds a write through the Redis guard
	// (fenceredis) after each store write: an item appended to a list per
	// key, under keys that start with KeyPrefix. Default "": no Redis.
	RedisAddr string
	// QueueURL, if set, adds the queue path: the URL of a RabbitMQ broker
	// (amqp:// or amqps://; "amqp" alone is DefaultQueueURL). Workers
	// publish a message stamped with their lease (fencemsg) before each
	// round of writes, to a queue of the run, and resend it with the same
	// stamp after an unknown outcome; a consumer process applies each
	// delivery through fencemsg with a fencesql guard, its effect a row
	// of a table of the run. PostgresDSN is required. The checker
	// "queue-messages-fenced" holds the table and the consumer's
	// decisions against the publishes. Default "": no queue.
	QueueURL string
	// QueueDelayShare is the share of leases whose messages all go
	// through the run's delay queue, which holds each for DelayMax before
	// it moves to the main queue, behind later holders' messages.
	// Default 0.2; negative disables.
	QueueDelayShare float64
	// ConsumerKillInterval is the mean time between kills (SIGKILL) of
	// the queue consumer (uniform in [½, 1½]×); half of them land right
	// after it decided a message applied, before its ack. It stays down
	// for DelayMin..DelayMax while messages pile up. Default 4s;
	// negative: no kills.
	ConsumerKillInterval time.Duration
	// KeepTables keeps the run's PostgreSQL tables, Redis keys and queues
	// for inspection.
	KeepTables bool

	// OutputDir receives histories, logs, summary.json and, when the
	// linearizability check fails, its visualization. Required.
	OutputDir string
	// WorkerCommand, if set, starts workers written in any language: the
	// command plus "--spec" and the worker.Spec as JSON. Such a worker runs
	// the Go worker's loop and writes the same history records and events
	// (docs/torture.md, "Workers in other languages"). Default: none, every
	// worker is this harness's Go worker.
	WorkerCommand []string
	// WorkerCommandWorkers is how many of the Workers run WorkerCommand
	// (the first ones); the others are Go workers. Default (0): all of
	// them when WorkerCommand is set.
	WorkerCommandWorkers int
	// Command starts this harness's child processes: Command plus "node",
	// "worker" or "store" and "--spec" JSON. Default: this executable with
	// "torture" (the fencectl binary).
	Command []string
	// Seed seeds the harness's and workers' random choices. Default: from
	// the clock. The interleaving of processes is not reproducible.
	Seed uint64
	// CheckTimeout bounds the linearizability check. Default 60s; a check
	// that times out reports "unknown", not a violation.
	CheckTimeout time.Duration
	// Log receives progress lines. Default io.Discard.
	Log io.Writer
}

// Validate fills in defaults and checks the configuration.
func (c *Config) Validate() error {
	if !proc.SignalsSupported {
		return proc.ErrUnsupported
	}
	if err := c.setDefaults(); err != nil {
		return err
	}
	return c.check()
}

// setDefaults fills in the zero fields.
func (c *Config) setDefaults() error {
	setDefault(&c.Duration, 60*time.Second)
	setDefault(&c.Workers, 4)
	setDefault(&c.Keys, 3)
	setDefault(&c.TTL, time.Second)
	setDefault(&c.Wait, 2*c.TTL)
	setDefault(&c.TryProbability, 0.2)
	setDefault(&c.WritesMin, 2)
	setDefault(&c.WritesMax, max(5, c.WritesMin))
	setDefault(&c.ThinkMax, c.TTL/5)
	setDefault(&c.GetProbability, 0.5)
	setDefault(&c.LongHoldShare, 0.25)
	setDefault(&c.AbandonProbability, 0.1)
	setDefault(&c.PauseProbability, 0.3)
	setDefault(&c.PauseMin, c.TTL*3/2)
	setDefault(&c.PauseMax, 3*c.TTL)
	setDefault(&c.DelayShare, 0.1)
	setDefault(&c.SequenceShare, 0.3)
	setDefault(&c.LostAnswerShare, 0.1)
	setDefault(&c.DelayMin, c.TTL*3/2)
	setDefault(&c.DelayMax, 3*c.TTL)
	setDefault(&c.CrashInterval, 8*time.Second)
	setDefault(&c.DownMin, 100*time.Millisecond)
	setDefault(&c.DownMax, time.Second)
	setDefault(&c.SnapshotBeforeCrash, 0.3)
	setDefault(&c.AfterAckShare, 0.5)
	setDefault(&c.NodeSnapshotThreshold, 8)
	setDefault(&c.NodeSnapshotInterval, 200*time.Millisecond)
	setDefault(&c.Nodes, 1)
	if c.Nodes > 1 {
		setDefault(&c.NodeHeartbeatTimeout, c.TTL/4)
	}
	setDefault(&c.FollowerReadShare, 0.5)
	setDefault(&c.NodeMinTTL, min(c.TTL, time.Second))
	setDefault(&c.CheckTimeout, 60*time.Second)
	if c.Seed == 0 {
		c.Seed = uint64(time.Now().UnixNano())
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	if len(c.Command) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("torture config: Command: %w", err)
		}
		c.Command = []string{exe, "torture"}
	}
	setDefault(&c.ClusterFaultInterval, 3*time.Second)
	c.AfterAckShare = enabled(c.AfterAckShare)
	if c.QueueURL == "amqp" {
		c.QueueURL = DefaultQueueURL
	}
	setDefault(&c.QueueDelayShare, 0.2)
	setDefault(&c.ConsumerKillInterval, 4*time.Second)
	return nil
}

// check checks the rules between fields, once the defaults are in.
func (c *Config) check() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("torture config: "+format, args...)) }
	if c.Duration < 0 {
		bad("Duration %v is negative", c.Duration)
	}
	if c.Workers < 1 || c.Keys < 1 {
		bad("Workers (%d) and Keys (%d) must be at least 1", c.Workers, c.Keys)
	}
	if c.WorkerCommandWorkers < 0 || c.WorkerCommandWorkers > c.Workers || (c.WorkerCommandWorkers > 0 && len(c.WorkerCommand) == 0) {
		bad("WorkerCommandWorkers %d must be 0..Workers (%d), and needs WorkerCommand", c.WorkerCommandWorkers, c.Workers)
	}
	if c.TTL < 10*time.Millisecond {
		bad("TTL %v is below 10ms", c.TTL)
	}
	if c.Wait < 0 || c.ThinkMax < 0 {
		bad("Wait and ThinkMax must not be negative")
	}
	if c.WritesMin < 1 || c.WritesMax < c.WritesMin {
		bad("WritesMin %d and WritesMax %d must satisfy 1 <= WritesMin <= WritesMax", c.WritesMin, c.WritesMax)
	}
	for name, p := range map[string]float64{"GetProbability": c.GetProbability, "TryProbability": c.TryProbability, "AbandonProbability": c.AbandonProbability,
		"PauseProbability": c.PauseProbability, "DelayShare": c.DelayShare, "SequenceShare": c.SequenceShare, "LostAnswerShare": c.LostAnswerShare, "LongHoldShare": c.LongHoldShare, "AfterAckShare": c.AfterAckShare, "SnapshotBeforeCrash": c.SnapshotBeforeCrash, "FollowerReadShare": c.FollowerReadShare} {
		if p > 1 {
			bad("%s %v is above 1", name, p)
		}
	}
	// A freeze or a delay shorter than the TTL cannot outlive the lease,
	// which is the whole point of them.
	if c.PauseMin <= c.TTL || c.PauseMax < c.PauseMin {
		bad("pauses must satisfy TTL %v < PauseMin %v <= PauseMax %v", c.TTL, c.PauseMin, c.PauseMax)
	}
	if c.DelayMin <= c.TTL || c.DelayMax < c.DelayMin {
		bad("delays must satisfy TTL %v < DelayMin %v <= DelayMax %v", c.TTL, c.DelayMin, c.DelayMax)
	}
	if c.CrashInterval < 0 || c.DownMin < 0 || c.DownMax < c.DownMin || c.StoreCrashInterval < 0 {
		bad("crash timing must satisfy CrashInterval >= 0, StoreCrashInterval >= 0, 0 <= DownMin <= DownMax")
	}
	if c.NodeSnapshotInterval < 5*time.Millisecond {
		bad("NodeSnapshotInterval %v is below 5ms", c.NodeSnapshotInterval)
	}
	if c.Nodes != 1 && c.Nodes != 3 && c.Nodes != 5 {
		bad("Nodes %d: 1, 3 or 5", c.Nodes)
	}
	if c.Nodes > 1 && c.NodeHeartbeatTimeout > c.TTL/4 {
		bad("NodeHeartbeatTimeout %v: a cluster run needs at most TTL/4 (%v), so that a failover ends well within a lease", c.NodeHeartbeatTimeout, c.TTL/4)
	}
	if c.Nodes > 1 && c.Endpoint != "" {
		bad("Nodes applies to local nodes, not to an external Endpoint")
	}
	for _, k := range c.ClusterFaults {
		if !slices.Contains(clusterFaultKinds, k) {
			bad("ClusterFaults: unknown kind %q (known: %s)", k, strings.Join(clusterFaultKinds, ", "))
		}
	}
	if c.ClusterFaultInterval < 0 {
		bad("ClusterFaultInterval %v is negative", c.ClusterFaultInterval)
	}
	if c.Endpoint != "" && (len(c.Failpoints) > 0 || c.LoseUnsynced) {
		bad("Failpoints and LoseUnsynced apply to local nodes only")
	}
	if _, err := failpoint.Parse(strings.Join(c.Failpoints, ",")); err != nil {
		bad("%v", err)
	}
	if c.Endpoint == "" && (c.NodeKillCommand != "" || c.NodeStartCommand != "") {
		bad("NodeKillCommand and NodeStartCommand apply to an external Endpoint only")
	}
	if (c.NodeKillCommand == "") != (c.NodeStartCommand == "") {
		bad("NodeKillCommand and NodeStartCommand go together")
	}
	if c.Endpoint != "" && !strings.HasPrefix(c.Endpoint, "http://") && !strings.HasPrefix(c.Endpoint, "https://") {
		bad("Endpoint %q is not an http(s) URL", c.Endpoint)
	}
	if c.StoreURL != "" && !strings.HasPrefix(c.StoreURL, "http://") && !strings.HasPrefix(c.StoreURL, "https://") {
		bad("StoreURL %q is not an http(s) URL", c.StoreURL)
	}
	if c.StoreURL != "" && c.StoreCrashInterval > 0 {
		bad("StoreCrashInterval needs the store started by the harness, not StoreURL")
	}
	if c.OutputDir == "" {
		bad("OutputDir is required")
	}
	if c.QueueURL != "" && !strings.HasPrefix(c.QueueURL, "amqp://") && !strings.HasPrefix(c.QueueURL, "amqps://") {
		bad("QueueURL %q is not an amqp(s) URL", c.QueueURL)
	}
	if c.QueueURL != "" && c.PostgresDSN == "" {
		bad("QueueURL needs PostgresDSN: the consumer's guard keeps its tokens in PostgreSQL")
	}
	if c.QueueDelayShare > 1 {
		bad("QueueDelayShare %v is above 1", c.QueueDelayShare)
	}
	return errors.Join(errs...)
}

// DefaultQueueURL is the broker of Config.QueueURL "amqp": a local
// RabbitMQ with its default user.
const DefaultQueueURL = "amqp://guest:guest@127.0.0.1:5672/"

func setDefault[T comparable](p *T, def T) {
	var zero T
	if *p == zero {
		*p = def
	}
}

// enabled treats a negative probability as "disabled" (0 means default).
func enabled(p float64) float64 { return max(p, 0) }
