package torture

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencedio/fenced/internal/torture/check"
	"github.com/fencedio/fenced/internal/torture/history"
	"github.com/fencedio/fenced/internal/torture/netfault"
	"github.com/fencedio/fenced/internal/torture/proc"
)

// Run runs one torture test: it starts the node(s), the store and the
// workers, injects faults for cfg.Duration, stops everything, reads back
// what the resources hold and runs the checkers. It returns a report even
// when the checkers found violations; an error means that the run itself
// could not be carried out (bad configuration, a process that would not
// start, a resource that could not be read).
//
// If ctx ends early, the run stops early and is checked as far as it got.
// Every child process is gone when Run returns.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.OutputDir, 0o755); err != nil {
		return nil, fmt.Errorf("torture: output dir: %w", err)
	}
	e := &engine{
		cfg:        cfg,
		rng:        rand.New(rand.NewPCG(cfg.Seed, 0x70727475)),
		aim:        make(chan struct{}, 1),
		ackedLog:   make(chan struct{}, 1),
		ackedRenew: make(chan struct{}, 1),
		workers:    map[int]*workerState{},
	}
	e.runID = fmt.Sprintf("%06x", e.rng.Uint32()&0xffffff)
	if e.cfg.KeyPrefix == "" {
		e.cfg.KeyPrefix = "torture/" + e.runID + "/"
	}
	defer e.cleanup()
	return e.run(ctx)
}

type engine struct {
	cfg   Config
	runID string
	start time.Time // when the workers started

	rngMu sync.Mutex
	rng   *rand.Rand

	nodes      []proc.Node
	localNodes []*proc.LocalNode
	// netem and linkProxies are a cluster's network (Nodes > 1).
	netem       *netfault.Network
	linkProxies []*netfault.LinkProxy
	// recoveryProblems are recoveries that failed (a cluster not whole, or
	// a single node not serving, after a fault); guarded by mu.
	recoveryProblems []string
	// rejoinedWiped describes wiped members that became voters again on
	// their own (disk-loss); guarded by mu.
	rejoinedWiped []timedNote
	// op is what the operator faults found (operatorfaults.go).
	op operatorState
	// acks reports acknowledgements from the nodes' side (nil: only the
	// workers' records of them are known).
	acks *ackListener
	// clusterChecks are the end-of-run cluster checks.
	clusterChecks []check.Result
	storeProc     *proc.Child
	storeURL      string
	proxy         *netfault.DelayProxy
	db            *sql.DB
	scopeTable    string
	writeTable    string
	rdb           *redis.Client
	// q is the queue path (nil without Config.QueueURL).
	q    *queueState
	keys []string

	mu      sync.Mutex
	workers map[int]*workerState
	stats   FaultStats
	aim     chan struct{} // an acquisition is starting or a key was just freed
	// ackedLog and ackedRenew: a worker just recorded an acknowledged
	// grant or release (written to the raft log), or renewal (not).
	ackedLog, ackedRenew chan struct{}

	faults    sync.WaitGroup
	faultCtx  context.Context // set when faults start; guarded by mu
	faultsOff bool            // no new fault may start; guarded by mu
	stopping  bool            // workers are being stopped; guarded by mu
	// crashed describes processes that exited on their own; guarded by mu.
	crashed []string
}

// timedNote is something that happened at a time (Unix ns).
type timedNote struct {
	at   int64
	what string
}

type workerState struct {
	id          int
	incarnation int
	proc        *proc.Child
	history     string
	state       string
	key         string
	lease       int
	paused      bool
}

// FaultStats counts the faults a run injected.
type FaultStats struct {
	Pauses       int `json:"pauses"`
	Crashes      int `json:"crashes"`
	AimedCrashes int `json:"aimedCrashes"`
	// CrashesAfterAck counts crashes sent right after a worker recorded an
	// acknowledged grant, renewal or release.
	CrashesAfterAck int `json:"crashesAfterAck"`
	// CrashesAfterNodeAck counts the crashes after an acknowledgement that
	// were timed from the node's side (failpoint.AckNotifyEnvVar), and
	// AckToKillMicros is the median time from the node's report to the
	// kill, in microseconds.
	CrashesAfterNodeAck int     `json:"crashesAfterNodeAck"`
	AckToKillMicros     float64 `json:"ackToKillMicros,omitempty"`
	ackToKill           []time.Duration
	// ForcedSnapshots counts snapshots the harness asked for just before a
	// crash; SnapshotsTaken and SnapshotRestores are what the node
	// processes reported, forced or not; a kill can come before a node
	// reports its last one, so they are lower bounds.
	ForcedSnapshots  int `json:"forcedSnapshots"`
	SnapshotsTaken   int `json:"snapshotsTaken"`
	SnapshotRestores int `json:"snapshotRestores"`
	// CrashesDuringAcquisition counts crashes while at least one worker
	// had an acquisition in flight.
	CrashesDuringAcquisition int `json:"crashesDuringAcquisition"`
	StoreCrashes             int `json:"storeCrashes"`
	// PowerLosses counts the kills of nodes and the store that were
	// simulated power losses (Config.LoseUnsynced).
	PowerLosses int `json:"powerLosses"`
	// WorkersKilled counts workers that did not stop within the grace
	// period at the end and were killed.
	WorkersKilled int `json:"workersKilled"`
	// ConsumerKills counts the kills of the queue consumer;
	// ConsumerKillsAfterCommit those aimed right after it decided a
	// message applied, before the ack.
	ConsumerKills            int `json:"consumerKills,omitempty"`
	ConsumerKillsAfterCommit int `json:"consumerKillsAfterCommit,omitempty"`
	// Cluster counts the faults of a cluster run; its kills are also
	// counted in Crashes.
	Cluster ClusterFaultStats `json:"cluster"`
}

func (e *engine) logf(format string, args ...any) {
	fmt.Fprintf(e.cfg.Log, "torture: "+format+"\n", args...)
}

func (e *engine) uniform(lo, hi time.Duration) time.Duration {
	e.rngMu.Lock()
	defer e.rngMu.Unlock()
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(e.rng.Int64N(int64(hi-lo)+1))
}

func (e *engine) intN(n int) int {
	e.rngMu.Lock()
	defer e.rngMu.Unlock()
	return e.rng.IntN(n)
}

func (e *engine) chance(p float64) bool {
	e.rngMu.Lock()
	defer e.rngMu.Unlock()
	return e.rng.Float64() < p
}

func (e *engine) run(ctx context.Context) (*Report, error) {
	cfg := &e.cfg
	e.logf("run %s, seed %d, output in %s", e.runID, cfg.Seed, cfg.OutputDir)
	for i := range cfg.Keys {
		e.keys = append(e.keys, fmt.Sprintf("%sk%d", cfg.KeyPrefix, i))
	}
	if err := e.startServices(ctx); err != nil {
		return nil, err
	}
	start := time.Now()
	e.start = start
	if err := e.startWorkers(); err != nil {
		return nil, err
	}
	faultCtx, stopFaults := context.WithCancel(ctx)
	defer stopFaults()
	e.startFaults(faultCtx)

	select {
	case <-ctx.Done():
		e.logf("interrupted after %v: stopping and checking what ran", time.Since(start).Round(time.Second))
	case <-time.After(cfg.Duration):
	}
	e.mu.Lock()
	e.faultsOff = true
	e.mu.Unlock()
	stopFaults()
	e.faults.Wait()
	e.logf("stopping workers")
	e.stopWorkers()
	elapsed := time.Since(start)

	hist, ev, err := e.readBack()
	if err != nil {
		return nil, err
	}
	e.logf("checking %d operations", len(hist.Ops))
	rep := e.check(hist, ev, elapsed)
	if err := rep.writeJSON(filepath.Join(cfg.OutputDir, "summary.json")); err != nil {
		return rep, err
	}
	return rep, nil
}

// startServices starts the node(s), the store, the PostgreSQL tables, the
// queue path and the delaying proxy.
func (e *engine) startServices(ctx context.Context) error {
	cfg := &e.cfg
	if cfg.nodeSideAcks() {
		a, err := newAckListener(max(cfg.Nodes, 1))
		if err != nil {
			return err
		}
		e.acks = a
	}
	if err := e.startNodes(ctx); err != nil {
		return err
	}
	if err := e.startStore(ctx); err != nil {
		return err
	}
	if cfg.RedisAddr != "" {
		if err := e.openRedis(ctx); err != nil {
			return err
		}
	}
	if cfg.PostgresDSN != "" {
		if err := e.createTables(ctx); err != nil {
			return err
		}
	}
	if cfg.QueueURL != "" {
		if err := e.startQueue(ctx); err != nil {
			return err
		}
	}
	if enabled(cfg.DelayShare) > 0 {
		p, err := netfault.NewDelayProxy(e.storeURL, cfg.DelayMin, cfg.DelayMax, cfg.Seed)
		if err != nil {
			return fmt.Errorf("torture: proxy: %w", err)
		}
		e.proxy = p
	}
	return nil
}

// readBack runs once the workers have stopped: it delivers the delayed
// writes, drains the queues, reads the histories and what the resources hold, checks a
// cluster, stops the services and adds up their snapshot counts. It does
// not depend on the caller's context any more: a Ctrl-C still gets a
// checked, if shorter, run.
func (e *engine) readBack() (*history.History, *check.Evidence, error) {
	rctx, cancel := context.WithTimeout(context.Background(), e.cfg.DelayMax+time.Minute)
	defer cancel()
	var delayed []history.DelayedWrite
	if e.proxy != nil {
		dctx, dcancel := context.WithTimeout(rctx, e.cfg.DelayMax+5*time.Second)
		delayed = e.proxy.Drain(dctx)
		dcancel()
	}
	if e.q != nil {
		e.drainQueue()
	}
	hist, err := history.ReadHistory(e.historyPaths()...)
	if err != nil {
		return nil, nil, err
	}
	if e.storeProc != nil {
		// The last store crash may have just been restarted.
		if err := proc.WaitHealthy(rctx, e.storeURL+"/healthz"); err != nil {
			return nil, nil, fmt.Errorf("torture: store: %w (see store.log)", err)
		}
	}
	ev, err := e.collect(rctx, hist, delayed)
	if err != nil {
		return nil, nil, err
	}
	if e.netem != nil {
		e.clusterChecks = e.checkCluster()
		e.clusterChecks = append(e.clusterChecks, e.operatorChecks()...)
	} else if len(e.localNodes) > 0 {
		e.clusterChecks = []check.Result{e.checkNodeBack()}
	}
	e.stopServices()
	for _, n := range e.localNodes {
		taken, restored := snapshotCounts(n.Proc.LogPath)
		e.mu.Lock()
		e.stats.SnapshotsTaken += taken
		e.stats.SnapshotRestores += restored
		e.mu.Unlock()
	}
	return hist, ev, nil
}

func (e *engine) historyPaths() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for i := range e.cfg.Workers {
		if ws, ok := e.workers[i]; ok {
			if _, err := os.Stat(ws.history); err == nil {
				out = append(out, ws.history)
			}
		}
	}
	return out
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
