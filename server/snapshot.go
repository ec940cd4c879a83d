package server

import (
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/raft"
)

// Snapshot takes a raft snapshot now, as the threshold would, and truncates
// the log behind it (keeping SnapshotThreshold entries). The torture
// harness forces one just before it kills a node, so that a restart
// restores state from a snapshot that is as fresh as it can be. Having
// nothing new to snapshot is not an error.
func (s *Server) Snapshot(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	err := s.raft.Snapshot().Error()
	if err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) {
		return fmt.Errorf("snapshot: %w", err)
	}
	return nil
}

// SnapshotStats returns how many snapshots this process started and how
// many it restored (at start, or sent by a leader), for tests that must
// show that snapshots happened.
func (s *Server) SnapshotStats() (taken, restored uint64) {
	return s.fsm.SnapshotStats()
}
