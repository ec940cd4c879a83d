package server

import (
	"context"
	"strconv"
	"time"

	"github.com/hashicorp/raft"
)

// A node applies the log it holds when it starts only once raft knows the
// entries committed: after an election, or once a leader has told it. It
// serves HTTP before that, and until then its state lacks leases that
// exist. A stream that starts from the state (a dashboard's snapshot,
// Watch from now) waits until the node has caught up, so that it never
// shows those leases as gone and then their replayed grants as new. A node
// that cannot learn what committed (a follower cut off from its cluster)
// waits as long.

// catchUpPoll is how often watchCatchUp looks again. Raft tells nothing
// when it hands entries to the state machine, and the last entries of a
// log may be ones the state machine never sees (no-ops, barriers).
const catchUpPoll = 10 * time.Millisecond

// watchCatchUp closes caughtUp once the node has applied the log it held
// at start (replayed), or returns when the node ends first.
func (s *Server) watchCatchUp() {
	t := time.NewTicker(catchUpPoll)
	defer t.Stop()
	for !s.replayed() {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
	}
	close(s.caughtUp)
}

// awaitCatchUp waits until the node has caught up with the log it held at
// start, and reports false if ctx ends first. Request contexts end with
// the node.
func (s *Server) awaitCatchUp(ctx context.Context) bool {
	select {
	case <-s.caughtUp:
		return true
	default:
	}
	if s.replayed() { // the poll has not looked since
		return true
	}
	if s.catchUpWait != nil {
		s.catchUpWait()
	}
	select {
	case <-s.caughtUp:
		return true
	case <-ctx.Done():
		return false
	}
}

// replayed reports whether the state machine has applied every entry of
// the log this node held at start that is still in its log (a follower
// drops the uncommitted end of its log that the leader's conflicts with).
//
// Raft counts an entry as applied once it has handed it to the state
// machine, which may still be applying it: so the entries up to the
// target must also be no-ops and barriers (which the state machine never
// sees), applied by this process, or in the last snapshot taken or
// restored.
func (s *Server) replayed() bool {
	target := min(s.replayedTo, s.raft.LastIndex())
	if s.raft.AppliedIndex() < target {
		return false
	}
	done := s.fsm.LastIndex()
	if snap, err := strconv.ParseUint(s.raft.Stats()["last_snapshot_index"], 10, 64); err == nil {
		done = max(done, snap)
	}
	for i := target; i > done; i-- {
		var l raft.Log
		if err := s.raftLogs.GetLog(i, &l); err != nil {
			return false
		}
		if l.Type == raft.LogCommand || l.Type == raft.LogConfiguration {
			return false
		}
	}
	return true
}
