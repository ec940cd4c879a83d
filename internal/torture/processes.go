package torture

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fencedio/fenced/fence/fencesql"
	"github.com/fencedio/fenced/internal/failpoint"
	"github.com/fencedio/fenced/internal/testutil"
	"github.com/fencedio/fenced/internal/torture/proc"
	"github.com/fencedio/fenced/internal/torture/worker"
)

func (e *engine) startNodes(ctx context.Context) error {
	cfg := &e.cfg
	if cfg.Endpoint != "" {
		n := proc.NewExternalNode(strings.TrimRight(cfg.Endpoint, "/"), cfg.NodeKillCommand, cfg.NodeStartCommand)
		e.nodes = append(e.nodes, n)
		e.logf("testing the fenced deployment at %s (crashes: %v)", n.Endpoint(), n.Crashable() && !cfg.NoCrashes)
		return nil
	}
	if cfg.Nodes > 1 {
		return e.startCluster(ctx)
	}
	for i := range cfg.Nodes {
		listen, err := testutil.FreeAddr()
		if err != nil {
			return err
		}
		raftAddr, err := testutil.FreeAddr()
		if err != nil {
			return err
		}
		id := fmt.Sprintf("node%d", i+1)
		err = e.addLocalNode(ctx, proc.NodeSpec{
			NodeID: id, DataDir: filepath.Join(cfg.OutputDir, id), Listen: listen, RaftListen: raftAddr,
			MinTTL: cfg.NodeMinTTL, HeartbeatTimeout: cfg.NodeHeartbeatTimeout,
			SnapshotThreshold: cfg.NodeSnapshotThreshold, SnapshotInterval: cfg.NodeSnapshotInterval,
		})
		if err != nil {
			return err
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, n := range e.localNodes {
		if err := proc.WaitHealthy(wctx, n.Endpoint()+"/healthz"); err != nil {
			return fmt.Errorf("torture: %s: %w (see %s.log)", n.Name(), err, filepath.Join(e.cfg.OutputDir, n.Name()))
		}
	}
	return nil
}

// failpointEnv is the environment of a node: its mutants and whether its
// kills are power losses.
func (e *engine) failpointEnv() []string {
	var env []string
	if len(e.cfg.Failpoints) > 0 {
		env = append(env, failpoint.EnvVar+"="+strings.Join(e.cfg.Failpoints, ","))
	}
	if e.cfg.LoseUnsynced {
		env = append(env, failpoint.LoseUnsyncedEnvVar+"=1")
	}
	return env
}

// workerEnv is the environment of a Go worker: the run's mutants, which
// its SQL guard may hold.
func (e *engine) workerEnv() []string {
	if len(e.cfg.Failpoints) == 0 {
		return nil
	}
	return []string{failpoint.EnvVar + "=" + strings.Join(e.cfg.Failpoints, ",")}
}

// addLocalNode starts a node process of the run.
func (e *engine) addLocalNode(ctx context.Context, spec proc.NodeSpec) error {
	n, err := proc.NewLocalNode(e.cfg.Command, spec, filepath.Join(e.cfg.OutputDir, spec.NodeID+".log"))
	if err != nil {
		return err
	}
	n.Proc.Env = e.failpointEnv()
	if e.cfg.Nodes > 1 {
		n.Proc.Env = append(n.Proc.Env, failpoint.LogStallEnvVar+"="+e.stallPath(spec.NodeID))
	}
	if e.acks != nil {
		n.Proc.Env = append(n.Proc.Env, e.acks.env(len(e.localNodes)))
	}
	if len(e.cfg.Failpoints) > 0 {
		e.logf("mutants switched on in %s: %s", spec.NodeID, strings.Join(e.cfg.Failpoints, ","))
	}
	n.Proc.OnExit = func(err error) { e.serviceCrashed(n.Proc, err) }
	if err := n.Start(ctx); err != nil {
		return err
	}
	e.nodes = append(e.nodes, n)
	e.localNodes = append(e.localNodes, n)
	return nil
}

func (e *engine) startStore(ctx context.Context) error {
	cfg := &e.cfg
	if cfg.StoreURL != "" {
		e.storeURL = strings.TrimRight(cfg.StoreURL, "/")
		return nil
	}
	addr, err := testutil.FreeAddr()
	if err != nil {
		return err
	}
	b, _ := json.Marshal(proc.StoreSpec{DataDir: filepath.Join(cfg.OutputDir, "store"), Listen: addr, NoFencing: cfg.NoFencing})
	e.storeProc = &proc.Child{
		Name:    "store",
		Argv:    append(append([]string{}, cfg.Command...), proc.RoleStore, "--spec", string(b)),
		LogPath: filepath.Join(cfg.OutputDir, "store.log"),
	}
	// The store's guard holds mutants too (a guard that re-applies a
	// copy, say); so do the Go workers' SQL guards (workerEnv).
	e.storeProc.Env = e.failpointEnv()
	e.storeProc.OnExit = func(err error) { e.serviceCrashed(e.storeProc, err) }
	if err := e.storeProc.Start(); err != nil {
		return err
	}
	e.storeURL = "http://" + addr
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := proc.WaitHealthy(wctx, e.storeURL+"/healthz"); err != nil {
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
	_, err = db.ExecContext(ctx, `CREATE TABLE `+worker.QuoteIdent(e.writeTable)+` (
		id     bigserial PRIMARY KEY,
		scope  text NOT NULL,
		token  bigint NOT NULL,
		worker integer NOT NULL,
		object text NOT NULL,
		seq    bigint NOT NULL DEFAULT 0
	)`)
	if err != nil {
		return fmt.Errorf("torture: postgres: create %s: %w", e.writeTable, err)
	}
	return nil
}

func (e *engine) workerSpec(id int, history string) worker.Spec {
	cfg := &e.cfg
	s := worker.Spec{
		ID: id, Endpoint: e.nodes[0].Endpoint(), Keys: e.keys, StoreURL: e.storeURL,
		PostgresDSN: cfg.PostgresDSN, ScopeTable: e.scopeTable, WriteTable: e.writeTable, NoFencing: cfg.NoFencing,
		RedisAddr: cfg.RedisAddr, RedisPrefix: e.redisPrefix(),
		TTL: cfg.TTL, Wait: cfg.Wait, WritesMin: cfg.WritesMin, WritesMax: cfg.WritesMax, ThinkMax: cfg.ThinkMax,
		GetProbability: enabled(cfg.GetProbability), TryProbability: enabled(cfg.TryProbability),
		FollowerReadShare:   enabled(cfg.FollowerReadShare),
		LongHoldShare:       enabled(cfg.LongHoldShare),
		DelayShare:          enabled(cfg.DelayShare),
		SequenceShare:       enabled(cfg.SequenceShare),
		LostAnswerShare:     enabled(cfg.LostAnswerShare),
		AbandonProbability:  enabled(cfg.AbandonProbability),
		WriteTimeout:        max(2*time.Second, 2*cfg.TTL),
		DelayedWriteTimeout: cfg.TTL / 2,
		History:             history,
		Seed:                cfg.Seed,
		// Half the workers call over their Session stream, half unary.
		Unary: id%2 == 1,
	}
	if e.proxy != nil {
		s.ProxyURL = e.proxy.URL()
	}
	if e.q != nil {
		s.QueueURL, s.Queue, s.DelayQueue = cfg.QueueURL, e.q.admin.Main, e.q.admin.Delay
		s.QueueDelayShare = enabled(cfg.QueueDelayShare)
	}
	if len(e.nodes) > 1 {
		// Each worker starts at a different node and fails over.
		s.Endpoints = e.endpoints(id)
	}
	return s
}

func (e *engine) workerArgv(ws *workerState) []string {
	spec := e.workerSpec(ws.id, ws.history)
	spec.Incarnation = ws.incarnation
	b, _ := json.Marshal(spec)
	if e.foreignWorker(ws.id) {
		return append(append([]string{}, e.cfg.WorkerCommand...), "--spec", string(b))
	}
	return append(append([]string{}, e.cfg.Command...), proc.RoleWorker, "--spec", string(b))
}

// foreignWorker reports whether worker id runs Config.WorkerCommand.
func (e *engine) foreignWorker(id int) bool {
	n := e.cfg.WorkerCommandWorkers
	if n == 0 {
		n = e.cfg.Workers
	}
	return len(e.cfg.WorkerCommand) > 0 && id < n
}

func (e *engine) startWorkers() error {
	for i := range e.cfg.Workers {
		ws := &workerState{id: i, history: filepath.Join(e.cfg.OutputDir, fmt.Sprintf("worker%d.jsonl", i)), state: worker.EventIdle}
		ws.proc = &proc.Child{
			Name:     fmt.Sprintf("worker%d", i),
			Argv:     e.workerArgv(ws),
			LogPath:  filepath.Join(e.cfg.OutputDir, fmt.Sprintf("worker%d.log", i)),
			OnStdout: func(line []byte) { e.onEvent(ws, line) },
			OnExit:   func(err error) { e.workerCrashed(ws, err) },
		}
		if !e.foreignWorker(i) {
			ws.proc.Env = e.workerEnv()
		}
		e.mu.Lock()
		e.workers[i] = ws
		e.mu.Unlock()
		if err := ws.proc.Start(); err != nil {
			return err
		}
	}
	return nil
}

// crashedf records a process that exited on its own: a bug in the client
// library, the worker, the node or the store.
func (e *engine) crashedf(p *proc.Child, err error) {
	msg := fmt.Sprintf("%s exited with an error: %v", p.Name, err)
	if err == nil {
		// The harness signals a child only with SIGKILL, SIGSTOP and
		// SIGCONT during a run; a clean exit means a signal from elsewhere.
		msg = fmt.Sprintf("%s exited cleanly without being asked to: a SIGTERM or SIGINT from outside the harness?", p.Name)
	}
	if ex := proc.LogExcerpt(p.LogPath, 8); ex != "" {
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
	ws.state, ws.paused, ws.lease = worker.EventIdle, false, 0
	ws.proc.Argv = e.workerArgv(ws)
	if err := ws.proc.Start(); err != nil {
		e.logf("restart %s: %v", ws.proc.Name, err)
	}
}

// serviceCrashed records the crash of a node or store and starts it again,
// unless the run is ending.
func (e *engine) serviceCrashed(p *proc.Child, err error) {
	e.crashedf(p, err)
	time.Sleep(e.cfg.DownMin)
	e.mu.Lock()
	stopping := e.stopping
	e.mu.Unlock()
	if !stopping && !p.Running() {
		if err := p.Start(); err != nil {
			e.logf("restart %s: %v", p.Name, err)
		}
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
			if w.proc.Stop(grace) {
				e.mu.Lock()
				e.stats.WorkersKilled++
				e.mu.Unlock()
				e.logf("%s did not stop within %v and was killed", w.proc.Name, grace)
				return
			}
			e.checkExit(w.proc)
		}()
	}
	wg.Wait()
}

// stopServices stops the store and nodes gracefully.
func (e *engine) stopServices() {
	if e.storeProc != nil && !e.storeProc.Stop(15*time.Second) {
		e.checkExit(e.storeProc)
	}
	for _, n := range e.localNodes {
		if !n.Stop(10 * time.Second) {
			e.checkExit(n.Proc)
		}
	}
}

// checkExit records a process asked to stop that exited with an error, for
// instance status 66 from a race-detector build that saw a data race.
func (e *engine) checkExit(p *proc.Child) {
	if err := p.ExitError(); err != nil {
		e.crashedf(p, fmt.Errorf("on a graceful stop: %w", err))
	}
}

// cleanup kills whatever still runs and drops the run's tables.
func (e *engine) cleanup() {
	e.mu.Lock()
	var procs []*proc.Child
	for _, w := range e.workers {
		procs = append(procs, w.proc)
	}
	e.mu.Unlock()
	if e.storeProc != nil {
		procs = append(procs, e.storeProc)
	}
	for _, n := range e.localNodes {
		procs = append(procs, n.Proc)
	}
	for _, p := range procs {
		if p.Running() {
			_ = p.Kill()
		}
	}
	if e.proxy != nil {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		e.proxy.Drain(ctx)
	}
	for _, p := range e.linkProxies {
		p.Close()
	}
	if e.acks != nil {
		e.acks.close()
	}
	e.dropRedis()
	if e.q != nil {
		e.closeQueue()
	}
	if e.db != nil {
		if !e.cfg.KeepTables {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			for _, t := range []string{e.writeTable, e.scopeTable} {
				if _, err := e.db.ExecContext(ctx, `DROP TABLE IF EXISTS `+worker.QuoteIdent(t)); err != nil {
					e.logf("drop %s: %v", t, err)
				}
			}
			cancel()
		}
		e.db.Close()
	}
}
