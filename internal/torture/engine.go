package torture

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fencedio/fenced/fence/fencehttp"
	"github.com/fencedio/fenced/fence/fencesql"
	"github.com/fencedio/fenced/internal/failpoint"
	"github.com/fencedio/fenced/store"
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

	rngMu sync.Mutex
	rng   *rand.Rand

	nodes      []Node
	localNodes []*localNode
	storeProc  *child
	storeURL   string
	proxy      *delayProxy
	db         *sql.DB
	scopeTable string
	writeTable string
	keys       []string

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

type workerState struct {
	id          int
	incarnation int
	proc        *child
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
	// WorkersKilled counts workers that did not stop within the grace
	// period at the end and were killed.
	WorkersKilled int `json:"workersKilled"`
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
	if err := e.startNodes(ctx); err != nil {
		return nil, err
	}
	if err := e.startStore(ctx); err != nil {
		return nil, err
	}
	if cfg.PostgresDSN != "" {
		if err := e.createTables(ctx); err != nil {
			return nil, err
		}
	}
	if enabled(cfg.DelayShare) > 0 {
		p, err := newDelayProxy(e.storeURL, cfg.DelayMin, cfg.DelayMax, cfg.Seed)
		if err != nil {
			return nil, fmt.Errorf("torture: proxy: %w", err)
		}
		e.proxy = p
	}
	start := time.Now()
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

	// Reading back must not depend on the caller's context any more: a
	// Ctrl-C still gets a checked, if shorter, run.
	rctx, cancel := context.WithTimeout(context.Background(), cfg.DelayMax+time.Minute)
	defer cancel()
	var delayed []DelayedWrite
	if e.proxy != nil {
		dctx, dcancel := context.WithTimeout(rctx, cfg.DelayMax+5*time.Second)
		delayed = e.proxy.drain(dctx)
		dcancel()
	}
	hist, err := ReadHistory(e.historyPaths()...)
	if err != nil {
		return nil, err
	}
	if e.storeProc != nil {
		// The last store crash may have just been restarted.
		if err := waitHealthy(rctx, e.storeURL+"/healthz"); err != nil {
			return nil, fmt.Errorf("torture: store: %w (see store.log)", err)
		}
	}
	ev, err := e.collect(rctx, hist, delayed)
	if err != nil {
		return nil, err
	}
	e.stopServices()
	for _, n := range e.localNodes {
		taken, restored := snapshotCounts(n.proc.logPath)
		e.mu.Lock()
		e.stats.SnapshotsTaken += taken
		e.stats.SnapshotRestores += restored
		e.mu.Unlock()
	}

	e.logf("checking %d operations", len(hist.Ops))
	rep := e.check(hist, ev, elapsed)
	if err := rep.writeJSON(filepath.Join(cfg.OutputDir, "summary.json")); err != nil {
		return rep, err
	}
	return rep, nil
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func (e *engine) startNodes(ctx context.Context) error {
	cfg := &e.cfg
	if cfg.Endpoint != "" {
		n := &externalNode{endpoint: strings.TrimRight(cfg.Endpoint, "/"), killCmd: cfg.NodeKillCommand, runCmd: cfg.NodeStartCommand}
		e.nodes = append(e.nodes, n)
		e.logf("testing the fenced deployment at %s (crashes: %v)", n.endpoint, n.Crashable() && !cfg.NoCrashes)
		return nil
	}
	for i := range cfg.Nodes {
		listen, err := freeAddr()
		if err != nil {
			return err
		}
		raftAddr, err := freeAddr()
		if err != nil {
			return err
		}
		id := fmt.Sprintf("node%d", i+1)
		n, err := newLocalNode(cfg.Command, NodeSpec{
			NodeID: id, DataDir: filepath.Join(cfg.OutputDir, id), Listen: listen, RaftListen: raftAddr,
			MinTTL: cfg.NodeMinTTL, HeartbeatTimeout: cfg.NodeHeartbeatTimeout,
			SnapshotThreshold: cfg.NodeSnapshotThreshold, SnapshotInterval: cfg.NodeSnapshotInterval,
		}, filepath.Join(cfg.OutputDir, id+".log"))
		if err != nil {
			return err
		}
		if len(cfg.Failpoints) > 0 {
			n.proc.env = []string{failpoint.EnvVar + "=" + strings.Join(cfg.Failpoints, ",")}
			e.logf("mutants switched on in %s: %s", id, strings.Join(cfg.Failpoints, ","))
		}
		n.proc.onExit = func(err error) { e.serviceCrashed(n.proc, err) }
		if err := n.Start(ctx); err != nil {
			return err
		}
		e.nodes = append(e.nodes, n)
		e.localNodes = append(e.localNodes, n)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, n := range e.localNodes {
		if err := waitHealthy(wctx, n.Endpoint()+"/healthz"); err != nil {
			return fmt.Errorf("torture: %s: %w (see %s.log)", n.Name(), err, filepath.Join(e.cfg.OutputDir, n.Name()))
		}
	}
	return nil
}

func (e *engine) startStore(ctx context.Context) error {
	cfg := &e.cfg
	if cfg.StoreURL != "" {
		e.storeURL = strings.TrimRight(cfg.StoreURL, "/")
		return nil
	}
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	b, _ := json.Marshal(StoreSpec{DataDir: filepath.Join(cfg.OutputDir, "store"), Listen: addr, NoFencing: cfg.NoFencing})
	e.storeProc = &child{
		name:    "store",
		argv:    append(append([]string{}, cfg.Command...), RoleStore, "--spec", string(b)),
		logPath: filepath.Join(cfg.OutputDir, "store.log"),
	}
	e.storeProc.onExit = func(err error) { e.serviceCrashed(e.storeProc, err) }
	if err := e.storeProc.start(); err != nil {
		return err
	}
	e.storeURL = "http://" + addr
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := waitHealthy(wctx, e.storeURL+"/healthz"); err != nil {
		return fmt.Errorf("torture: store: %w (see store.log)", err)
	}
	return nil
}

func (e *engine) createTables(ctx context.Context) error {
	db, err := sql.Open("pgx", e.cfg.PostgresDSN)
	if err != nil {
		return fmt.Errorf("torture: postgres: %w", err)
	}
	e.db = db
	e.scopeTable = "torture_" + e.runID + "_scopes"
	e.writeTable = "torture_" + e.runID + "_writes"
	g, err := fencesql.New(db, fencesql.Config{Dialect: fencesql.Postgres, Table: e.scopeTable})
	if err != nil {
		return fmt.Errorf("torture: postgres: %w", err)
	}
	if err := g.Migrate(ctx); err != nil {
		return fmt.Errorf("torture: postgres: %w", err)
	}
	_, err = db.ExecContext(ctx, `CREATE TABLE `+pgIdent(e.writeTable)+` (
		id     bigserial PRIMARY KEY,
		scope  text NOT NULL,
		token  bigint NOT NULL,
		worker integer NOT NULL,
		object text NOT NULL UNIQUE
	)`)
	if err != nil {
		return fmt.Errorf("torture: postgres: create %s: %w", e.writeTable, err)
	}
	return nil
}

func (e *engine) workerSpec(id int, history string) WorkerSpec {
	cfg := &e.cfg
	s := WorkerSpec{
		ID: id, Endpoint: e.nodes[0].Endpoint(), Keys: e.keys, StoreURL: e.storeURL,
		PostgresDSN: cfg.PostgresDSN, ScopeTable: e.scopeTable, WriteTable: e.writeTable, NoFencing: cfg.NoFencing,
		TTL: cfg.TTL, Wait: cfg.Wait, WritesMin: cfg.WritesMin, WritesMax: cfg.WritesMax, ThinkMax: cfg.ThinkMax,
		GetProbability: enabled(cfg.GetProbability), TryProbability: enabled(cfg.TryProbability),
		LongHoldShare:       enabled(cfg.LongHoldShare),
		DelayShare:          enabled(cfg.DelayShare),
		AbandonProbability:  enabled(cfg.AbandonProbability),
		WriteTimeout:        max(2*time.Second, 2*cfg.TTL),
		DelayedWriteTimeout: cfg.TTL / 2,
		History:             history,
		Seed:                cfg.Seed,
	}
	if e.proxy != nil {
		s.ProxyURL = e.proxy.URL()
	}
	return s
}

func (e *engine) workerArgv(ws *workerState) []string {
	spec := e.workerSpec(ws.id, ws.history)
	spec.Incarnation = ws.incarnation
	b, _ := json.Marshal(spec)
	return append(append([]string{}, e.cfg.Command...), RoleWorker, "--spec", string(b))
}

func (e *engine) startWorkers() error {
	for i := range e.cfg.Workers {
		ws := &workerState{id: i, history: filepath.Join(e.cfg.OutputDir, fmt.Sprintf("worker%d.jsonl", i)), state: evIdle}
		ws.proc = &child{
			name:     fmt.Sprintf("worker%d", i),
			argv:     e.workerArgv(ws),
			logPath:  filepath.Join(e.cfg.OutputDir, fmt.Sprintf("worker%d.log", i)),
			onStdout: func(line []byte) { e.onEvent(ws, line) },
			onExit:   func(err error) { e.workerCrashed(ws, err) },
		}
		e.mu.Lock()
		e.workers[i] = ws
		e.mu.Unlock()
		if err := ws.proc.start(); err != nil {
			return err
		}
	}
	return nil
}

// crashedf records a process that exited on its own: a bug in the client
// library, the worker, the node or the store.
func (e *engine) crashedf(p *child, err error) {
	msg := fmt.Sprintf("%s exited with an error: %v", p.name, err)
	if err == nil {
		// The harness signals a child only with SIGKILL, SIGSTOP and
		// SIGCONT during a run; a clean exit means a signal from elsewhere.
		msg = fmt.Sprintf("%s exited cleanly without being asked to: a SIGTERM or SIGINT from outside the harness?", p.name)
	}
	if ex := logExcerpt(p.logPath, 8); ex != "" {
		msg += "\n" + ex
	}
	e.mu.Lock()
	e.crashed = append(e.crashed, msg)
	e.mu.Unlock()
	e.logf("%s", msg)
}

// workerCrashed records the crash and starts the worker again as a new
// incarnation, whose operations, owners and objects are named apart.
func (e *engine) workerCrashed(ws *workerState, err error) {
	e.crashedf(ws.proc, err)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopping {
		return
	}
	ws.incarnation++
	ws.state, ws.paused, ws.lease = evIdle, false, 0
	ws.proc.argv = e.workerArgv(ws)
	if err := ws.proc.start(); err != nil {
		e.logf("restart %s: %v", ws.proc.name, err)
	}
}

// serviceCrashed records the crash of a node or store and starts it again,
// unless the run is ending.
func (e *engine) serviceCrashed(p *child, err error) {
	e.crashedf(p, err)
	time.Sleep(e.cfg.DownMin)
	e.mu.Lock()
	stopping := e.stopping
	e.mu.Unlock()
	if !stopping && !p.running() {
		if err := p.start(); err != nil {
			e.logf("restart %s: %v", p.name, err)
		}
	}
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

// onEvent tracks what a worker is doing, to aim pauses and crashes.
func (e *engine) onEvent(ws *workerState, line []byte) {
	var ev Event
	if json.Unmarshal(line, &ev) != nil {
		return
	}
	if ev.Type == evAcked {
		c := e.ackedLog
		if ev.Kind == KindRenew {
			c = e.ackedRenew
		}
		select {
		case c <- struct{}{}:
		default:
		}
		return
	}
	e.mu.Lock()
	ws.state, ws.key = ev.Type, ev.Key
	if ev.Type == evHolding {
		ws.lease = ev.Lease
	}
	lease := ws.lease
	e.mu.Unlock()
	switch ev.Type {
	case evAcquiring, evReleased:
		select {
		case e.aim <- struct{}{}:
		default:
		}
	case evHolding:
		if !e.chance(enabled(e.cfg.PauseProbability)) {
			return
		}
		// Add under mu, so that no pause starts once the run stops them.
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.faultCtx == nil || e.faultsOff {
			return
		}
		e.faults.Add(1)
		go func() { defer e.faults.Done(); e.pause(ws, lease) }()
	}
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

// pause freezes a worker that holds a lease, somewhere in its writes, for
// longer than the TTL, so that its lease expires while it is frozen.
func (e *engine) pause(ws *workerState, lease int) {
	e.mu.Lock()
	ctx := e.faultCtx
	e.mu.Unlock()
	if !sleepCtx(ctx, e.uniform(0, 2*e.cfg.ThinkMax)) {
		return
	}
	e.mu.Lock()
	if ws.state != evHolding || ws.lease != lease || ws.paused {
		e.mu.Unlock()
		return
	}
	ws.paused = true
	e.mu.Unlock()
	if err := ws.proc.signal(sigStop); err != nil {
		e.mu.Lock()
		ws.paused = false
		e.mu.Unlock()
		return
	}
	e.mu.Lock()
	e.stats.Pauses++
	e.mu.Unlock()
	sleepCtx(ctx, e.uniform(e.cfg.PauseMin, e.cfg.PauseMax))
	_ = ws.proc.signal(sigCont)
	e.mu.Lock()
	ws.paused = false
	e.mu.Unlock()
}

func (e *engine) startFaults(ctx context.Context) {
	e.mu.Lock()
	e.faultCtx = ctx
	e.mu.Unlock()
	if !e.cfg.NoCrashes {
		var crashable []Node
		for _, n := range e.nodes {
			if n.Crashable() {
				crashable = append(crashable, n)
			}
		}
		if len(crashable) > 0 {
			e.faults.Add(1)
			go func() { defer e.faults.Done(); e.crashNodes(ctx, crashable) }()
		}
	}
	if e.storeProc != nil && e.cfg.StoreCrashInterval > 0 {
		e.faults.Add(1)
		go func() { defer e.faults.Done(); e.crashStore(ctx) }()
	}
}

func (e *engine) acquiring() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, ws := range e.workers {
		if ws.state == evAcquiring {
			n++
		}
	}
	return n
}

// crashNodes kills a node with SIGKILL at random moments, half of them
// right after a worker starts an acquisition or frees a key (so that a
// grant is being written), and starts it again after a short downtime. Every
// node is up again when it returns.
func (e *engine) crashNodes(ctx context.Context, nodes []Node) {
	iv := e.cfg.CrashInterval
	for {
		if !sleepCtx(ctx, e.uniform(iv/2, iv*3/2)) {
			return
		}
		// AfterAckShare of the kills come within microseconds after an
		// acknowledgement, two thirds of them of a grant or release, whose
		// log entry must survive; of the others, a third come a few
		// milliseconds after an acquisition starts or a key is freed.
		var aimed, afterAck bool
		switch {
		case e.chance(e.cfg.AfterAckShare):
			c := e.ackedLog
			if e.chance(1.0 / 3) {
				c = e.ackedRenew
			}
			afterAck = e.await(ctx, c)
		case e.chance(1.0 / 3):
			aimed = e.await(ctx, e.aim)
			time.Sleep(e.uniform(0, 3*time.Millisecond))
		}
		if ctx.Err() != nil {
			return
		}
		var up []Node
		for _, n := range nodes {
			if n.Up() {
				up = append(up, n)
			}
		}
		if len(up) == 0 {
			continue
		}
		e.rngMu.Lock()
		n := up[e.rng.IntN(len(up))]
		e.rngMu.Unlock()
		forced := false
		// Not after an acknowledgement: the kill must follow it at once.
		if ln, ok := n.(*localNode); ok && !afterAck && e.chance(enabled(e.cfg.SnapshotBeforeCrash)) && ln.healthy() {
			// The node handles the signal once it serves; a snapshot of a
			// few leases takes a few milliseconds, so most finish first.
			forced = ln.proc.signal(sigSnapshot) == nil
			time.Sleep(e.uniform(time.Millisecond, 30*time.Millisecond))
		}
		inflight := e.acquiring()
		if err := n.Kill(context.Background()); err != nil {
			e.logf("crash %s: %v", n.Name(), err)
		}
		e.mu.Lock()
		e.stats.Crashes++
		if aimed {
			e.stats.AimedCrashes++
		}
		if afterAck {
			e.stats.CrashesAfterAck++
		}
		if forced {
			e.stats.ForcedSnapshots++
		}
		if inflight > 0 {
			e.stats.CrashesDuringAcquisition++
		}
		e.mu.Unlock()
		down := e.uniform(e.cfg.DownMin, e.cfg.DownMax)
		sleepCtx(ctx, down)
		if err := n.Start(context.Background()); err != nil {
			e.logf("restart %s: %v", n.Name(), err)
		}
		e.logf("crashed %s (kill -9%s%s%s, %d acquisitions in flight), down %v", n.Name(),
			map[bool]string{true: ", aimed", false: ""}[aimed], map[bool]string{true: ", after an ack", false: ""}[afterAck],
			map[bool]string{true: ", snapshot forced", false: ""}[forced], inflight, down.Round(time.Millisecond))
	}
}

// await drains a stale signal from c and waits up to 2s for a fresh one.
func (e *engine) await(ctx context.Context, c <-chan struct{}) bool {
	select {
	case <-c:
	default:
	}
	select {
	case <-ctx.Done():
		return false
	case <-c:
		return true
	case <-time.After(2 * time.Second):
		return false
	}
}

func (e *engine) crashStore(ctx context.Context) {
	iv := e.cfg.StoreCrashInterval
	for {
		if !sleepCtx(ctx, e.uniform(iv/2, iv*3/2)) {
			return
		}
		if err := e.storeProc.kill(); err != nil {
			e.logf("crash store: %v", err)
		}
		e.mu.Lock()
		e.stats.StoreCrashes++
		e.mu.Unlock()
		down := e.uniform(e.cfg.DownMin, e.cfg.DownMax)
		sleepCtx(ctx, down)
		if err := e.storeProc.start(); err != nil {
			e.logf("restart store: %v", err)
		}
		e.logf("crashed the store (kill -9), down %v", down.Round(time.Millisecond))
	}
}

// stopWorkers lets every worker finish the lease in hand and exit; a worker
// that does not is killed.
func (e *engine) stopWorkers() {
	e.mu.Lock()
	e.stopping = true
	var ws []*workerState
	for _, w := range e.workers {
		ws = append(ws, w)
	}
	e.mu.Unlock()
	grace := e.cfg.Wait + 5*e.cfg.TTL + time.Duration(e.cfg.WritesMax)*(e.cfg.ThinkMax+2*max(2*time.Second, 2*e.cfg.TTL))
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if w.proc.stop(grace) {
				e.mu.Lock()
				e.stats.WorkersKilled++
				e.mu.Unlock()
				e.logf("%s did not stop within %v and was killed", w.proc.name, grace)
				return
			}
			e.checkExit(w.proc)
		}()
	}
	wg.Wait()
}

// collect reads what the resources hold: the store's audit log and final
// objects, and the PostgreSQL writes table.
func (e *engine) collect(ctx context.Context, h *History, delayed []DelayedWrite) (*Evidence, error) {
	ev := &Evidence{Delayed: delayed, Objects: map[string]FinalObject{}}
	hc := &http.Client{Timeout: 10 * time.Second}
	audit, err := readAudit(ctx, hc, e.storeURL, e.cfg.KeyPrefix)
	if err != nil {
		return nil, err
	}
	ev.Audit = audit
	var names []string
	for _, op := range h.Ops {
		if op.Kind == KindPut && op.Outcome == OK {
			names = append(names, op.Object)
		}
	}
	for _, d := range delayed {
		if d.Status/100 == 2 {
			names = append(names, d.Object)
		}
	}
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
		next = make(chan string)
	)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for name := range next {
				obj, err := readObject(ctx, hc, e.storeURL, name)
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else {
					ev.Objects[name] = obj
				}
				mu.Unlock()
			}
		}()
	}
	for _, n := range names {
		next <- n
	}
	close(next)
	wg.Wait()
	if len(errs) > 0 {
		return nil, fmt.Errorf("torture: reading objects back: %w", errors.Join(errs[:min(len(errs), 3)]...))
	}
	if e.db != nil {
		ev.HasSQL = true
		rows, err := e.db.QueryContext(ctx, `SELECT id, scope, token, worker, object FROM `+pgIdent(e.writeTable)+` ORDER BY id`)
		if err != nil {
			return nil, fmt.Errorf("torture: postgres: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var r SQLRow
			var tok int64
			if err := rows.Scan(&r.ID, &r.Scope, &tok, &r.Worker, &r.Object); err != nil {
				return nil, fmt.Errorf("torture: postgres: %w", err)
			}
			r.Token = uint64(tok)
			ev.SQLRows = append(ev.SQLRows, r)
		}
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("torture: postgres: %w", err)
		}
	}
	return ev, nil
}

// readAudit pages through GET /v1/audit and keeps the records of the run's
// scopes (a shared store also holds other writes).
func readAudit(ctx context.Context, hc *http.Client, base, prefix string) ([]store.AuditRecord, error) {
	var out []store.AuditRecord
	var after uint64
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/v1/audit?after=%d&limit=10000", base, after), nil)
		resp, err := hc.Do(req)
		if err != nil {
			return nil, fmt.Errorf("torture: read audit: %w", err)
		}
		var page store.AuditPage
		err = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("torture: read audit: HTTP %d: %v", resp.StatusCode, err)
		}
		if len(page.Records) == 0 {
			return out, nil
		}
		for _, r := range page.Records {
			if strings.HasPrefix(r.Scope, prefix) {
				out = append(out, r)
			}
		}
		after = page.Next
	}
}

func readObject(ctx context.Context, hc *http.Client, base, name string) (FinalObject, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/objects/"+url.PathEscape(name), nil)
	resp, err := hc.Do(req)
	if err != nil {
		return FinalObject{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return FinalObject{}, err
	}
	switch resp.StatusCode {
	case http.StatusOK:
		tok, err := strconv.ParseUint(resp.Header.Get(fencehttp.HeaderToken), 10, 64)
		if err != nil {
			return FinalObject{}, fmt.Errorf("object %q: bad token header: %w", name, err)
		}
		return FinalObject{Present: true, Token: tok, Value: body}, nil
	case http.StatusNotFound:
		return FinalObject{}, nil
	}
	return FinalObject{}, fmt.Errorf("object %q: HTTP %d", name, resp.StatusCode)
}

// stopServices stops the store and nodes gracefully.
func (e *engine) stopServices() {
	if e.storeProc != nil && !e.storeProc.stop(15*time.Second) {
		e.checkExit(e.storeProc)
	}
	for _, n := range e.localNodes {
		if !n.stop(10 * time.Second) {
			e.checkExit(n.proc)
		}
	}
}

// checkExit records a process asked to stop that exited with an error, for
// instance status 66 from a race-detector build that saw a data race.
func (e *engine) checkExit(p *child) {
	if err := p.exitError(); err != nil {
		e.crashedf(p, fmt.Errorf("on a graceful stop: %w", err))
	}
}

// cleanup kills whatever still runs and drops the run's tables.
func (e *engine) cleanup() {
	e.mu.Lock()
	var procs []*child
	for _, w := range e.workers {
		procs = append(procs, w.proc)
	}
	e.mu.Unlock()
	if e.storeProc != nil {
		procs = append(procs, e.storeProc)
	}
	for _, n := range e.localNodes {
		procs = append(procs, n.proc)
	}
	for _, p := range procs {
		if p.running() {
			_ = p.kill()
		}
	}
	if e.proxy != nil {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		e.proxy.drain(ctx)
	}
	if e.db != nil {
		if !e.cfg.KeepTables {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			for _, t := range []string{e.writeTable, e.scopeTable} {
				if _, err := e.db.ExecContext(ctx, `DROP TABLE IF EXISTS `+pgIdent(t)); err != nil {
					e.logf("drop %s: %v", t, err)
				}
			}
			cancel()
		}
		e.db.Close()
	}
}

// snapshotCounts sums, over the processes logged in a node's log, the last
// statsPrefix line of each: counts restart with every process.
func snapshotCounts(logPath string) (taken, restored int) {
	b, err := os.ReadFile(logPath)
	if err != nil {
		return 0, 0
	}
	var t, r int
	for line := range strings.Lines(string(b)) {
		if strings.HasPrefix(line, "--- torture: starting ") {
			taken, restored, t, r = taken+t, restored+r, 0, 0
			continue
		}
		if rest, ok := strings.CutPrefix(line, statsPrefix); ok {
			fmt.Sscanf(rest, "snapshots=%d restores=%d", &t, &r)
		}
	}
	return taken + t, restored + r
}
