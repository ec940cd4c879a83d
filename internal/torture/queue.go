package torture

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"time"

	"github.com/fencedio/fenced/fence/fencesql"
	"github.com/fencedio/fenced/internal/torture/check"
	"github.com/fencedio/fenced/internal/torture/history"
	"github.com/fencedio/fenced/internal/torture/proc"
	"github.com/fencedio/fenced/internal/torture/queue"
	"github.com/fencedio/fenced/internal/torture/worker"
)

// consumerAckDelayMax bounds the consumer's wait between a final decision
// and its ack: the window that the kills aimed after a commit land in.
const consumerAckDelayMax = 5 * time.Millisecond

// queueState is the queue path of a run (Config.QueueURL).
type queueState struct {
	admin        *queue.Admin
	scopeTable   string
	messageTable string
	history      string // the consumer's decisions
	consumer     *proc.Child
	// applied signals that the consumer just decided a message applied.
	applied chan struct{}
	// incarnation counts the consumer's restarts; stopped: it is not to be
	// started again. Both guarded by engine.mu.
	incarnation int
	stopped     bool
	// left is what the queues held after the drain.
	left []history.QueuedMessage
}

// startQueue declares the run's queues, creates the consumer's tables and
// starts the consumer.
func (e *engine) startQueue(ctx context.Context) error {
	cfg := &e.cfg
	main, delay := queue.Names(e.runID)
	a, err := queue.OpenAdmin(cfg.QueueURL, main, delay, cfg.DelayMax)
	if err != nil {
		return fmt.Errorf("torture: %w", err)
	}
	q := &queueState{admin: a, applied: make(chan struct{}, 1),
		scopeTable:   "torture_" + e.runID + "_msgscopes",
		messageTable: "torture_" + e.runID + "_messages",
		history:      filepath.Join(cfg.OutputDir, "consumer.jsonl"),
	}
	e.q = q
	g, err := fencesql.New(e.db, fencesql.Config{Dialect: fencesql.Postgres, Table: q.scopeTable})
	if err == nil {
		err = g.Migrate(ctx)
	}
	if err == nil {
		_, err = e.db.ExecContext(ctx, queue.MessageTableSQL(q.messageTable))
	}
	if err != nil {
		return fmt.Errorf("torture: postgres: the consumer's tables: %w", err)
	}
	q.consumer = &proc.Child{
		Name:     "consumer",
		Argv:     e.consumerArgv(0),
		LogPath:  filepath.Join(cfg.OutputDir, "consumer.log"),
		Env:      e.workerEnv(),
		OnStdout: e.onConsumerEvent,
		OnExit: func(err error) {
			e.crashedf(q.consumer, err)
			e.restartConsumer()
		},
	}
	e.logf("queue path: workers publish to %s (and %s, which holds messages %v), a consumer process applies them", main, delay, cfg.DelayMax)
	return q.consumer.Start()
}

func (e *engine) consumerArgv(incarnation int) []string {
	b, _ := json.Marshal(queue.ConsumerSpec{
		URL: e.cfg.QueueURL, Queue: e.q.admin.Main, PostgresDSN: e.cfg.PostgresDSN,
		ScopeTable: e.q.scopeTable, MessageTable: e.q.messageTable, History: e.q.history,
		Incarnation: incarnation, AckDelayMax: consumerAckDelayMax, NoFencing: e.cfg.NoFencing, Seed: e.cfg.Seed,
	})
	return append(append([]string{}, e.cfg.Command...), proc.RoleConsumer, "--spec", string(b))
}

// onConsumerEvent signals the kills aimed between a commit and its ack.
func (e *engine) onConsumerEvent(line []byte) {
	var ev queue.Event
	if json.Unmarshal(line, &ev) != nil || ev.Outcome != history.DecisionApplied {
		return
	}
	select {
	case e.q.applied <- struct{}{}:
	default:
	}
}

// restartConsumer starts the consumer as a new incarnation, unless it runs
// or the run has stopped it for good.
func (e *engine) restartConsumer() {
	e.mu.Lock()
	defer e.mu.Unlock()
	q := e.q
	if q.stopped || q.consumer.Running() {
		return
	}
	q.incarnation++
	q.consumer.Argv = e.consumerArgv(q.incarnation)
	if err := q.consumer.Start(); err != nil {
		e.logf("restart consumer: %v", err)
	}
}

// killConsumer kills the consumer with SIGKILL at random moments, half of
// them right after it decided a message applied (committed, not yet
// acked), and starts it again after DelayMin..DelayMax, while messages
// wait in the queue. The consumer runs again when it returns.
func (e *engine) killConsumer(ctx context.Context) {
	iv := e.cfg.ConsumerKillInterval
	for sleepCtx(ctx, e.uniform(iv/2, iv*3/2)) {
		afterCommit := e.chance(0.5) && e.await(ctx, e.q.applied)
		if ctx.Err() != nil {
			return
		}
		if err := e.q.consumer.Kill(); err != nil {
			e.logf("kill consumer: %v", err)
		}
		e.mu.Lock()
		e.stats.ConsumerKills++
		if afterCommit {
			e.stats.ConsumerKillsAfterCommit++
		}
		e.mu.Unlock()
		down := e.uniform(e.cfg.DelayMin, e.cfg.DelayMax)
		sleepCtx(ctx, down)
		e.restartConsumer()
		e.logf("killed the consumer (kill -9%s), down %v", map[bool]string{true: ", between a commit and its ack", false: ""}[afterCommit], down.Round(time.Millisecond))
	}
}

// drainQueue runs once the workers have stopped: it lets the consumer
// empty the queues (the delay queue lets its last messages go DelayMax
// after they were published), bounded in time, then stops the consumer and
// takes what is left.
func (e *engine) drainQueue() {
	q := e.q
	e.restartConsumer()
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.DelayMax+30*time.Second)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for ctx.Err() == nil {
		n, err := q.admin.Ready()
		if err != nil {
			e.logf("drain: %v", err)
			break
		}
		if n == 0 {
			break
		}
		select {
		case <-ctx.Done():
			e.logf("drain: %d messages still queued after %v; they are checked as left in the queue", n, e.cfg.DelayMax+30*time.Second)
		case <-tick.C:
		}
	}
	e.mu.Lock()
	q.stopped = true
	e.mu.Unlock()
	if q.consumer.Stop(15 * time.Second) {
		e.logf("the consumer did not stop within 15s and was killed")
	} else {
		e.checkExit(q.consumer)
	}
	tctx, tcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer tcancel()
	left, err := q.admin.TakeLeft(tctx)
	if err != nil {
		e.logf("drain: taking what is left: %v", err)
	}
	q.left = left
}

// readQueue reads the consumer's table and decisions.
func (e *engine) readQueue(ctx context.Context) (*check.QueueEvidence, error) {
	q := e.q
	ev := &check.QueueEvidence{Left: q.left}
	e.mu.Lock()
	ev.Kills, ev.KillsAfterCommit = e.stats.ConsumerKills, e.stats.ConsumerKillsAfterCommit
	e.mu.Unlock()
	var err error
	if ev.Deliveries, err = history.ReadDeliveries(q.history); err != nil {
		return nil, fmt.Errorf("torture: %w", err)
	}
	rows, err := e.db.QueryContext(ctx, queue.RowsSQL(q.messageTable))
	if err != nil {
		return nil, fmt.Errorf("torture: postgres: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var r check.MessageRow
		var tok, seq int64
		if err := rows.Scan(&r.ID, &r.Scope, &tok, &seq, &r.MessageID, &r.Consumer, &r.At); err != nil {
			return nil, fmt.Errorf("torture: postgres: %w", err)
		}
		r.Token, r.Sequence = uint64(tok), uint64(seq)
		ev.Rows = append(ev.Rows, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("torture: postgres: %w", err)
	}
	return ev, nil
}

// closeQueue kills a consumer still running, and deletes the queues and
// the consumer's tables unless Config.KeepTables.
func (e *engine) closeQueue() {
	q := e.q
	if q.consumer != nil && q.consumer.Running() {
		_ = q.consumer.Kill()
	}
	if !e.cfg.KeepTables {
		if err := q.admin.Delete(); err != nil {
			e.logf("%v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, t := range []string{q.messageTable, q.scopeTable} {
			if _, err := e.db.ExecContext(ctx, `DROP TABLE IF EXISTS `+worker.QuoteIdent(t)); err != nil {
				e.logf("drop %s: %v", t, err)
			}
		}
	}
	q.admin.Close()
}
