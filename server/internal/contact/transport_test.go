package contact

import (
	"errors"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// TestQuorumSince checks the rule renewals rely on: only answers to
// requests sent after the check began, in the current term, count towards
// the quorum.
func TestQuorumSince(t *testing.T) {
	t0 := time.Now()
	before, after := t0.Add(-time.Millisecond), t0.Add(time.Millisecond)
	voters := []raft.ServerID{"a", "b", "c"}
	tests := []struct {
		name     string
		contacts map[raft.ServerID]contact
		voters   []raft.ServerID
		want     bool
	}{
		{"self alone of three", nil, voters, false},
		{"one fresh contact", map[raft.ServerID]contact{"b": {7, after}}, voters, true},
		{"contact in flight before the check", map[raft.ServerID]contact{"b": {7, before}, "c": {7, before}}, voters, false},
		{"fresh contact of an older term", map[raft.ServerID]contact{"b": {6, after}}, voters, false},
		{"five voters need two fresh", map[raft.ServerID]contact{"b": {7, after}, "c": {7, before}}, []raft.ServerID{"a", "b", "c", "d", "e"}, false},
		{"five voters, two fresh", map[raft.ServerID]contact{"b": {7, after}, "e": {7, after}}, []raft.ServerID{"a", "b", "c", "d", "e"}, true},
		{"single voter", nil, []raft.ServerID{"a"}, true},
		{"a non-voting self does not count", map[raft.ServerID]contact{"b": {7, after}}, []raft.ServerID{"b", "c", "d"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ct := New(nil, nil, nil)
			for id, c := range tt.contacts {
				ct.noteContact(id, c.term, c.sent)
			}
			if got := ct.QuorumSince("a", tt.voters, 7, t0); got != tt.want {
				t.Errorf("QuorumSince = %v, want %v", got, tt.want)
			}
		})
	}
	// A later answer to an earlier request does not move the contact back.
	ct := New(nil, nil, nil)
	ct.noteContact("b", 7, after)
	ct.noteContact("b", 7, before)
	if !ct.QuorumSince("a", voters, 7, t0) {
		t.Error("an older request's answer replaced a newer one")
	}
}

// tcpTransport is raft's transport on a port of its own (the node's runs
// on its peer port, internal/peers).
func tcpTransport(t *testing.T) *raft.NetworkTransport {
	t.Helper()
	tr, err := raft.NewTCPTransport("127.0.0.1:0", nil, 2, 5*time.Second, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// A member that may not vote refuses vote and pre-vote requests before
// raft sees them, refuses a leadership handover, and asks for no votes;
// log replication reaches raft. Once added, it votes.
func TestMemberWithoutVoteStaysOutOfElections(t *testing.T) {
	var votes atomic.Bool
	ct := New(tcpTransport(t), votes.Load, nil)
	t.Cleanup(func() { ct.Close() })
	consumer := ct.Consumer()
	peer := tcpTransport(t)
	t.Cleanup(func() { peer.Close() })
	target := ct.LocalAddr()

	// What reaches raft: answered here as raft would grant.
	go func() {
		for rpc := range consumer {
			switch rpc.Command.(type) {
			case *raft.RequestVoteRequest:
				rpc.Respond(&raft.RequestVoteResponse{Granted: true}, nil)
			case *raft.AppendEntriesRequest:
				rpc.Respond(&raft.AppendEntriesResponse{Success: true}, nil)
			default:
				rpc.Respond(nil, errors.New("unexpected"))
			}
		}
	}()
	header := raft.RPCHeader{ID: []byte("n1"), Addr: []byte("127.0.0.1:1")}
	var vote raft.RequestVoteResponse
	if err := peer.RequestVote("n2", target, &raft.RequestVoteRequest{RPCHeader: header, Term: 7}, &vote); err != nil || vote.Granted {
		t.Errorf("vote request to a member that may not vote: granted=%v, %v", vote.Granted, err)
	}
	var pre raft.RequestPreVoteResponse
	if err := peer.RequestPreVote("n2", target, &raft.RequestPreVoteRequest{RPCHeader: header, Term: 7}, &pre); err != nil || pre.Granted {
		t.Errorf("pre-vote request: granted=%v, %v", pre.Granted, err)
	}
	if err := peer.TimeoutNow("n2", target, &raft.TimeoutNowRequest{RPCHeader: header}, &raft.TimeoutNowResponse{}); err == nil {
		t.Error("a leadership handover to a member that may not vote was accepted")
	}
	var app raft.AppendEntriesResponse
	if err := peer.AppendEntries("n2", target, &raft.AppendEntriesRequest{RPCHeader: header, Term: 7}, &app); err != nil || !app.Success {
		t.Errorf("log replication to a member that may not vote: %+v, %v", app, err)
	}
	if err := ct.RequestVote("n1", peer.LocalAddr(), &raft.RequestVoteRequest{}, &raft.RequestVoteResponse{}); !errors.Is(err, ErrNoVote) {
		t.Errorf("a member that may not vote asked for a vote: %v", err)
	}

	votes.Store(true)
	vote = raft.RequestVoteResponse{}
	if err := peer.RequestVote("n2", target, &raft.RequestVoteRequest{RPCHeader: header, Term: 8}, &vote); err != nil || !vote.Granted {
		t.Errorf("vote request once added: granted=%v, %v", vote.Granted, err)
	}
}
