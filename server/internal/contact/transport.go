package contact

import (
	"errors"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// Transport is raft's transport, noting when each peer last answered
// an AppendEntries of this node's term, by the request's send time.
//
// It also keeps a member that may not vote (internal/peers/identity.go) out of elections:
// vote and pre-vote requests to it are refused here, before raft sees
// them, a handover of leadership to it fails, and it sends no vote
// requests of its own.
type Transport struct {
	*raft.NetworkTransport

	mu       sync.Mutex
	contacts map[raft.ServerID]contact

	// votes reports whether this member may vote; nil: always.
	votes func() bool
	// acked is told of every successful append to a peer: the peer holds
	// the log up to the last entry sent (internal/peers/acks.go); nil: nobody.
	acked func(id raft.ServerID, term, index uint64)
	rpcs  chan raft.RPC // Consumer, when votes may be false
	done  chan struct{}
	once  sync.Once // starts filter
	shut  sync.Once // closes done
}

// ErrNoVote answers a request that would make a member that may not vote
// take part in an election.
var ErrNoVote = errors.New("this member's data directory started empty while it was in the configuration: it does not vote until it is removed and added back")

// Consumer is raft's, less the vote requests a member that may not vote
// refuses. A member that votes when raft starts always will: the filter
// is left out.
func (t *Transport) Consumer() <-chan raft.RPC {
	if t.votes == nil || t.votes() {
		return t.NetworkTransport.Consumer()
	}
	t.once.Do(func() {
		t.rpcs = make(chan raft.RPC)
		go t.filter()
	})
	return t.rpcs
}

func (t *Transport) filter() {
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
				rpc.Respond(nil, ErrNoVote)
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
func (t *Transport) RequestVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	if t.votes != nil && !t.votes() {
		return ErrNoVote
	}
	return t.NetworkTransport.RequestVote(id, target, args, resp)
}

// RequestPreVote is raft's, refused while this member may not vote.
func (t *Transport) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	if t.votes != nil && !t.votes() {
		return ErrNoVote
	}
	return t.NetworkTransport.RequestPreVote(id, target, args, resp)
}

// Close closes raft's transport and ends the filter.
func (t *Transport) Close() error {
	t.shut.Do(func() { close(t.done) })
	return t.NetworkTransport.Close()
}

type contact struct {
	term uint64
	sent time.Time
}

// New wraps raft's transport t. votes reports whether this member may vote
// now; nil: always. acked is told of every successful append to a peer,
// with the term and index of the last entry it now holds; nil: nobody.
func New(t *raft.NetworkTransport, votes func() bool, acked func(id raft.ServerID, term, index uint64)) *Transport {
	return &Transport{NetworkTransport: t, contacts: make(map[raft.ServerID]contact), votes: votes, acked: acked, done: make(chan struct{})}
}

// noteAck tells acked of a successful append of entries.
func (t *Transport) noteAck(id raft.ServerID, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) {
	if t.acked == nil || !resp.Success || len(args.Entries) == 0 {
		return
	}
	last := args.Entries[len(args.Entries)-1]
	t.acked(id, last.Term, last.Index)
}

// AppendEntriesPipeline is raft's, noting successful appends.
func (t *Transport) AppendEntriesPipeline(id raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	p, err := t.NetworkTransport.AppendEntriesPipeline(id, target)
	if err != nil || t.acked == nil {
		return p, err
	}
	n := &notingPipeline{AppendPipeline: p, t: t, id: id, out: make(chan raft.AppendFuture), stop: make(chan struct{})}
	go n.relay()
	return n, nil
}

// notingPipeline passes raft's pipelined answers on, noting each success.
type notingPipeline struct {
	raft.AppendPipeline
	t    *Transport
	id   raft.ServerID
	out  chan raft.AppendFuture
	stop chan struct{}
	once sync.Once
}

func (p *notingPipeline) relay() {
	in := p.AppendPipeline.Consumer()
	for {
		select {
		case f := <-in:
			if f.Error() == nil {
				p.t.noteAck(p.id, f.Request(), f.Response())
			}
			select {
			case p.out <- f:
			case <-p.stop:
				return
			}
		case <-p.stop:
			return
		}
	}
}

func (p *notingPipeline) Consumer() <-chan raft.AppendFuture { return p.out }

func (p *notingPipeline) Close() error {
	p.once.Do(func() { close(p.stop) })
	return p.AppendPipeline.Close()
}

// AppendEntries is raft's, noting successful answers.
func (t *Transport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	sent := time.Now()
	err := t.NetworkTransport.AppendEntries(id, target, args, resp)
	if err == nil && resp.Term == args.Term {
		t.noteContact(id, args.Term, sent)
	}
	if err == nil {
		t.noteAck(id, args, resp)
	}
	return err
}

func (t *Transport) noteContact(id raft.ServerID, term uint64, sent time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if c := t.contacts[id]; c.term < term || (c.term == term && c.sent.Before(sent)) {
		t.contacts[id] = contact{term: term, sent: sent}
	}
}

// QuorumSince reports whether a quorum of voters, counting self, answered
// a request of term sent after since.
func (t *Transport) QuorumSince(self raft.ServerID, voters []raft.ServerID, term uint64, since time.Time) bool {
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
