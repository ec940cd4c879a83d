package server

import (
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
			ct := newContactTransport(nil, nil)
			for id, c := range tt.contacts {
				ct.noteContact(id, c.term, c.sent)
			}
			if got := ct.quorumSince("a", tt.voters, 7, t0); got != tt.want {
				t.Errorf("quorumSince = %v, want %v", got, tt.want)
			}
		})
	}
	// A later answer to an earlier request does not move the contact back.
	ct := newContactTransport(nil, nil)
	ct.noteContact("b", 7, after)
	ct.noteContact("b", 7, before)
	if !ct.quorumSince("a", voters, 7, t0) {
		t.Error("an older request's answer replaced a newer one")
	}
}
