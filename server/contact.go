package server

import (
	"time"

	"github.com/fencedio/fenced/server/internal/apierr"
	"github.com/hashicorp/raft"
)

// Renewals need a quorum contact that began after they arrived: see
// internal/contact, whose Transport records, per peer, when the last
// AppendEntries of this node's term that was answered was sent.

// verifyLeader is one leadership check for leadercheck.Check: raft's
// VerifyLeader, then a quorum contact begun after the check began. Each
// VerifyLeader makes raft send heartbeats at once, so the second round
// normally finds the answers to the first round's heartbeats. Under load
// the answers can be recorded after raft has counted them, so it tries
// again, at least three times and for up to half the heartbeat timeout,
// before it refuses (the caller's client then retries).
func (s *Server) verifyLeader() error {
	start := time.Now()
	for round := 0; round < 3 || time.Since(start) < s.cfg.HeartbeatTimeout/2; round++ {
		term := s.raft.CurrentTerm()
		if err := s.raft.VerifyLeader().Error(); err != nil {
			return err
		}
		f := s.raft.GetConfiguration()
		if err := f.Error(); err != nil {
			return err
		}
		var voters []raft.ServerID
		for _, srv := range f.Configuration().Servers {
			if srv.Suffrage == raft.Voter {
				voters = append(voters, srv.ID)
			}
		}
		if s.trans.QuorumSince(raft.ServerID(s.cfg.NodeID), voters, term, start) && s.raft.CurrentTerm() == term {
			return nil
		}
	}
	return apierr.ErrNoQuorumContact
}

// soleLeader reports whether this node leads and is the only voter of the
// latest configuration (committed or not, as raft counts its quorum). A
// configuration that adds a voter makes it false from the moment it is
// appended, before the new voter can take part in any election.
func (s *Server) soleLeader() bool {
	if s.raft.State() != raft.Leader {
		return false
	}
	f := s.raft.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	voters := 0
	self := false
	for _, srv := range f.Configuration().Servers {
		if srv.Suffrage == raft.Voter {
			voters++
			self = self || srv.ID == raft.ServerID(s.cfg.NodeID)
		}
	}
	return voters == 1 && self
}
