package torture

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/fencedio/fenced/internal/torture/check"
	"github.com/fencedio/fenced/internal/torture/history"
	"github.com/fencedio/fenced/internal/torture/proc"
	"github.com/fencedio/fenced/internal/torture/worker"
)

// onEvent tracks what a worker is doing, to aim pauses and crashes.
func (e *engine) onEvent(ws *workerState, line []byte) {
	var ev worker.Event
	if json.Unmarshal(line, &ev) != nil {
		return
	}
	if ev.Type == worker.EventAcked {
		c := e.ackedLog
		if ev.Kind == history.KindRenew {
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
	if ev.Type == worker.EventHolding {
		ws.lease = ev.Lease
	}
	lease := ws.lease
	e.mu.Unlock()
	switch ev.Type {
	case worker.EventAcquiring, worker.EventReleased:
		select {
		case e.aim <- struct{}{}:
		default:
		}
	case worker.EventHolding:
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
		go func() { defer e.faults.Done(); e.pause(ws, lease, e.uniform(0, 2*e.cfg.ThinkMax)) }()
	}
}

// pause freezes a worker that holds a lease, after delay (somewhere in its
// writes), for longer than the TTL, so that its lease expires while it is
// frozen.
func (e *engine) pause(ws *workerState, lease int, delay time.Duration) {
	e.mu.Lock()
	ctx := e.faultCtx
	e.mu.Unlock()
	if !sleepCtx(ctx, delay) {
		return
	}
	e.mu.Lock()
	if ws.state != worker.EventHolding || ws.lease != lease || ws.paused {
		e.mu.Unlock()
		return
	}
	ws.paused = true
	e.mu.Unlock()
	if err := ws.proc.Signal(proc.SigStop); err != nil {
		e.mu.Lock()
		ws.paused = false
		e.mu.Unlock()
		return
	}
	e.mu.Lock()
	e.stats.Pauses++
	e.mu.Unlock()
	sleepCtx(ctx, e.uniform(e.cfg.PauseMin, e.cfg.PauseMax))
	_ = ws.proc.Signal(proc.SigCont)
	e.mu.Lock()
	ws.paused = false
	e.mu.Unlock()
}

func (e *engine) startFaults(ctx context.Context) {
	e.mu.Lock()
	e.faultCtx = ctx
	e.mu.Unlock()
	if !e.cfg.NoCrashes && e.netem != nil {
		e.faults.Add(1)
		go func() { defer e.faults.Done(); e.clusterFaults(ctx) }()
	} else if !e.cfg.NoCrashes {
		var crashable []proc.Node
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
	if e.q != nil && e.cfg.ConsumerKillInterval > 0 {
		e.faults.Add(1)
		go func() { defer e.faults.Done(); e.killConsumer(ctx) }()
	}
}

func (e *engine) acquiring() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, ws := range e.workers {
		if ws.state == worker.EventAcquiring {
			n++
		}
	}
	return n
}

// crashNodes kills a node with SIGKILL at random moments, half of them
// right after a worker starts an acquisition or frees a key (so that a
// grant is being written), and starts it again after a short downtime. Every
// node is up again when it returns.
func (e *engine) crashNodes(ctx context.Context, nodes []proc.Node) {
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
		var ackAt time.Time
		switch {
		case e.chance(e.cfg.AfterAckShare) && e.acks != nil:
			// Timed from the node's side: the kill lands within a
			// millisecond of the answer leaving the node, in the gap
			// where a write acknowledged too early is still unwritten.
			want := isLogAck
			if e.chance(1.0 / 3) {
				want = func(a nodeAck) bool { return a.kind == "renew" }
			}
			var ack nodeAck
			ack, afterAck = e.acks.await(ctx, want)
			ackAt = ack.at
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
		var up []proc.Node
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
		// Not after an acknowledgement: the kill must follow it at once.
		c := e.crash(ctx, n, !afterAck, ackAt)
		if ln, ok := n.(*proc.LocalNode); ok {
			e.awaitNode(ln)
		}
		e.mu.Lock()
		if aimed {
			e.stats.AimedCrashes++
		}
		if afterAck {
			e.stats.CrashesAfterAck++
		}
		if afterAck && !ackAt.IsZero() {
			e.stats.CrashesAfterNodeAck++
		}
		e.mu.Unlock()
		e.logf("crashed %s (kill -9%s%s%s%s, %d acquisitions in flight), down %v", n.Name(),
			map[bool]string{true: ", aimed", false: ""}[aimed], map[bool]string{true: ", after an ack", false: ""}[afterAck],
			map[bool]string{true: ", snapshot forced", false: ""}[c.forced],
			map[bool]string{true: ", power loss", false: ""}[e.cfg.LoseUnsynced], c.inflight, c.down.Round(time.Millisecond))
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
		if err := e.storeProc.Kill(); err != nil {
			e.logf("crash store: %v", err)
		}
		e.mu.Lock()
		e.stats.StoreCrashes++
		if e.cfg.LoseUnsynced {
			e.stats.PowerLosses++
		}
		e.mu.Unlock()
		down := e.uniform(e.cfg.DownMin, e.cfg.DownMax)
		sleepCtx(ctx, down)
		if err := e.storeProc.Start(); err != nil {
			e.logf("restart store: %v", err)
		}
		e.logf("crashed the store (kill -9%s), down %v", map[bool]string{true: ", power loss", false: ""}[e.cfg.LoseUnsynced], down.Round(time.Millisecond))
	}
}

// crashed describes one crash of a node.
type crashed struct {
	down     time.Duration
	forced   bool // a snapshot was forced just before the kill
	inflight int  // acquisitions in flight at the kill
}

// crash kills node n with SIGKILL, first making a local node take a
// snapshot with chance SnapshotBeforeCrash if mayForce, counts the crash and
// starts the node again after DownMin..DownMax (at once if ctx ends).
// ackAt is when the node reported the acknowledgement the kill is aimed
// at, if it is.
func (e *engine) crash(ctx context.Context, n proc.Node, mayForce bool, ackAt time.Time) crashed {
	var c crashed
	if ln, ok := n.(*proc.LocalNode); ok && mayForce && e.chance(enabled(e.cfg.SnapshotBeforeCrash)) && ln.Healthy() {
		// The node handles the signal once it serves; a snapshot of a
		// few leases takes a few milliseconds, so most finish first.
		c.forced = ln.Proc.Signal(proc.SigSnapshot) == nil
		time.Sleep(e.uniform(time.Millisecond, 30*time.Millisecond))
	}
	c.inflight = e.acquiring()
	if !ackAt.IsZero() {
		d := time.Since(ackAt)
		e.mu.Lock()
		e.stats.ackToKill = append(e.stats.ackToKill, d)
		e.mu.Unlock()
	}
	if err := n.Kill(context.Background()); err != nil {
		e.logf("crash %s: %v", n.Name(), err)
	}
	e.mu.Lock()
	e.stats.Crashes++
	if e.cfg.LoseUnsynced {
		e.stats.PowerLosses++
	}
	if c.forced {
		e.stats.ForcedSnapshots++
	}
	if c.inflight > 0 {
		e.stats.CrashesDuringAcquisition++
	}
	e.mu.Unlock()
	c.down = e.uniform(e.cfg.DownMin, e.cfg.DownMax)
	sleepCtx(ctx, c.down)
	if err := n.Start(context.Background()); err != nil {
		e.logf("restart %s: %v", n.Name(), err)
	}
	return c
}

// awaitNode waits until a restarted single node serves again, and records a
// recovery problem if it does not within recoveryTimeout: a node that lost
// its configuration, for instance, never leads again.
func (e *engine) awaitNode(n *proc.LocalNode) {
	ctx, cancel := context.WithTimeout(context.Background(), recoveryTimeout)
	defer cancel()
	if err := proc.WaitHealthy(ctx, n.Endpoint()+"/healthz"); err != nil {
		e.mu.Lock()
		e.recoveryProblems = append(e.recoveryProblems, fmt.Sprintf("after a crash, %s did not serve again within %v: %v", n.Name(), recoveryTimeout, err))
		e.mu.Unlock()
	}
}

// checkNodeBack is NameNodesBack for a single local node: it served again
// within recoveryTimeout after every crash, and serves at the end.
func (e *engine) checkNodeBack() check.Result {
	back := check.Result{Name: NameNodesBack}
	e.mu.Lock()
	back.Checked = e.stats.Crashes + 1
	for _, p := range e.recoveryProblems {
		back.AddViolation("%s", p)
	}
	e.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), recoveryTimeout)
	defer cancel()
	for _, n := range e.localNodes {
		if err := proc.WaitHealthy(ctx, n.Endpoint()+"/healthz"); err != nil {
			back.AddViolation("at the end of the run, %s did not serve within %v: %v", n.Name(), recoveryTimeout, err)
		}
	}
	return back
}
