package server

import (
	"errors"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// Renewals need a quorum contact that began after they arrived.
//
// raft's VerifyLeader counts any heartbeat answer that comes in after the
// check began, including one to a heartbeat sent before it began. A leader
// paused with such an answer in flight (SIGSTOP, a long GC) could, on
// resuming, confirm a renewal on the strength of a contact older than the
// renewal, after a new leader had been elected and had reset the deadlines
// without it. So a leadership check here also requires that a quorum of
// voters (this node among them) answered, in the current term, an
// AppendEntries that was sent after the check began. contactTransport
// records, per peer, when the last such request that was answered was sent.

// errNoQuorumContact is returned when leadership was confirmed by raft but
// no quorum answered a request sent after the check began, after a few
// rounds: unavailable, the caller may retry.
var errNoQuorumContact = errors.New("not the leader, or no quorum contact since the request arrived")

// contactTransport is raft's transport, noting when each peer last answered
// an AppendEntries of this node's term, by the request's send time.
//
// It also keeps a member that may not vote (internal/peers/identity.go) out of elections:
// vote and pre-vote requests to it are refused here, before raft sees
// them, a handover of leadership to it fails, and it sends no vote
// requests of its own.
type contactTransport struct {
	*raft.NetworkTransport

	mu       sync.Mutex
	contacts map[raft.ServerID]contact

	// votes reports whether this member may vote; nil: always.
	votes func() bool
	rpcs  chan raft.RPC // Consumer, when votes may be false
	done  chan struct{}
	once  sync.Once // starts filter
	shut  sync.Once // closes done
}

// errNoVote answers a request that would make a member that may not vote
// take part in an election.
var errNoVote = errors.New("this member's data directory started empty while it was in the configuration: it does not vote until it is removed and added back")

// Consumer is raft's, less the vote requests a member that may not vote
// refuses. A member that votes when raft starts always will: the filter
// is left out.
func (t *contactTransport) Consumer() <-chan raft.RPC {
	if t.votes == nil || t.votes() {
		return t.NetworkTransport.Consumer()
	}
	t.once.Do(func() {
		t.rpcs = make(chan raft.RPC)
		go t.filter()
	})
	return t.rpcs
}

func (t *contactTransport) filter() {
	in := t.NetworkTransport.Consumer()
	for {
		var rpc raft.RPC
		select {
		case rpc = <-in:
		case <-t.done:
			return
		}
		if !t.votes() {
			switch req := rpc.Command.(type) {
			case *raft.RequestVoteRequest:
				rpc.Respond(&raft.RequestVoteResponse{Term: req.Term}, nil)
				continue
			case *raft.RequestPreVoteRequest:
				rpc.Respond(&raft.RequestPreVoteResponse{Term: req.Term}, nil)
				continue
			case *raft.TimeoutNowRequest:
				rpc.Respond(nil, errNoVote)
				continue
			}
		}
		select {
		case t.rpcs <- rpc:
		case <-t.done:
			return
		}
	}
}

// RequestVote is raft's, refused while this member may not vote.
func (t *contactTransport) RequestVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	if t.votes != nil && !t.votes() {
		return errNoVote
	}
	return t.NetworkTransport.RequestVote(id, target, args, resp)
}

// RequestPreVote is raft's, refused while this member may not vote.
func (t *contactTransport) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	if t.votes != nil && !t.votes() {
		return errNoVote
	}
	return t.NetworkTransport.RequestPreVote(id, target, args, resp)
}

// Close closes raft's transport and ends the filter.
func (t *contactTransport) Close() error {
	t.shut.Do(func() { close(t.done) })
	return t.NetworkTransport.Close()
}

type contact struct {
	term uint64
	sent time.Time
}

func newContactTransport(t *raft.NetworkTransport, votes func() bool) *contactTransport {
	return &contactTransport{NetworkTransport: t, contacts: make(map[raft.ServerID]contact), votes: votes, done: make(chan struct{})}
}

// AppendEntries is raft's, noting successful answers.
func (t *contactTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	sent := time.Now()
	err := t.NetworkTransport.AppendEntries(id, target, args, resp)
	if err == nil && resp.Term == args.Term {
		t.noteContact(id, args.Term, sent)
	}
	return err
}

func (t *contactTransport) noteContact(id raft.ServerID, term uint64, sent time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if c := t.contacts[id]; c.term < term || (c.term == term && c.sent.Before(sent)) {
		t.contacts[id] = contact{term: term, sent: sent}
	}
}

// quorumSince reports whether a quorum of voters, counting self, answered
// a request of term sent after since.
func (t *contactTransport) quorumSince(self raft.ServerID, voters []raft.ServerID, term uint64, since time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, v := range voters {
		if v == self {
			n++
			continue
		}
		if c := t.contacts[v]; c.term == term && c.sent.After(since) {
			n++
		}
	}
	return n > len(voters)/2
}

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
		if s.trans.quorumSince(raft.ServerID(s.cfg.NodeID), voters, term, start) && s.raft.CurrentTerm() == term {
			return nil
		}
	}
	return errNoQuorumContact
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
