package server

import (
	"net/http"

	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/lease"
	"github.com/fencedio/fenced/server/internal/admission"
	"github.com/fencedio/fenced/server/internal/api"
	"github.com/fencedio/fenced/server/internal/dashboard"
)

// Stats is what GET /v1/stats answers.
type Stats struct {
	Ready        bool   `json:"ready"`
	Leases       int    `json:"leases"`
	Waiters      int    `json:"waiters"`
	Term         uint64 `json:"term"`
	CommitIndex  uint64 `json:"commitIndex"`
	AppliedIndex uint64 `json:"appliedIndex"`
	// Transitions applied since this process started.
	Acquired  uint64 `json:"acquired"`
	Released  uint64 `json:"released"`
	Expired   uint64 `json:"expired"`
	Takeovers uint64 `json:"takeovers"`
}

// Stats returns a summary of the node for people and dashboards.
func (s *Server) Stats() Stats {
	st := Stats{
		Ready: s.Ready(), Waiters: s.waiters.Len(),
		Term: s.raft.CurrentTerm(), CommitIndex: s.raft.CommitIndex(), AppliedIndex: s.raft.AppliedIndex(),
		Acquired: s.counts.Acquired.Load(), Released: s.counts.Released.Load(),
		Expired: s.counts.Expired.Load(), Takeovers: s.counts.Takeovers.Load(),
	}
	s.fsm.Read(func(ls *lease.State) { st.Leases = ls.Len() })
	return st
}

// newDashboard is the node's dashboard: its page, GET /v1/stats and GET
// /v1/events.
func (s *Server) newDashboard() *dashboard.Handler {
	return dashboard.New(dashboard.Node{
		Stats:       func() any { return s.Stats() },
		CheckPrefix: api.ValidateKey,
		Admit: func(r *http.Request) (func(), error) {
			return s.subscribers.Acquire(admission.ClientIP(r.RemoteAddr))
		},
		CaughtUp: s.awaitCatchUp,
		Hub:      s.hub,
		Leases: func(prefix string) ([]*fencedv1.Lease, uint64) {
			view := s.fsm.View()
			leases, remaining := s.listRemaining(view, prefix, s.cfg.ListLimit)
			wire := make([]*fencedv1.Lease, len(leases))
			for i, l := range leases {
				wire[i] = api.WireLease(l, remaining[i], api.PublicView)
			}
			return wire, view.Applied()
		},
		Lease: func(l lease.Lease) *fencedv1.Lease {
			return api.WireLease(l, s.remaining(l.Key), api.PublicView)
		},
		ReadSlot:     s.reads.Acquire,
		FanoutSlot:   s.fanout.Acquire,
		WriteTimeout: s.cfg.StreamWriteTimeout,
		MaxUnacked:   s.cfg.StreamUnackedBytes,
		Cut:          s.streamCut,
	})
}
