package server

import (
	"context"
	"encoding/json"
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
		Acquired: s.counts.acquired.Load(), Released: s.counts.released.Load(),
		Expired: s.counts.expired.Load(), Takeovers: s.counts.takeovers.Load(),
	}
	st.Leases = s.fsm.View().Len()
	return st
}

func (s *Server) registerDashboard(mux *http.ServeMux) {
	ui := dashboard.Files()
	mux.Handle("GET /{$}", http.FileServerFS(ui))
	mux.Handle("GET /ui/", http.StripPrefix("/ui/", http.FileServerFS(ui)))
	mux.HandleFunc("GET /v1/stats", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(s.Stats())
	})
	mux.HandleFunc("GET /v1/events", s.serveEvents)
}

// serveEvents streams lease transitions as server-sent events: first a
// "snapshot" event with every current lease under ?prefix= (at most
// ListLimit), then one "lease" event per transition after it. A watcher that
// falls behind gets a "resync" event and should reconnect. A node that has
// not yet applied the log it held at start sends nothing until it has
// (awaitCatchUp).
func (s *Server) serveEvents(w http.ResponseWriter, r *http.Request) {
	wr := dashboard.NewWriter(w, s.cfg.StreamWriteTimeout)
	if wr == nil {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	prefix := r.URL.Query().Get("prefix")
	if prefix != "" {
		if err := api.ValidateKey(prefix); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
	}
	release, err := s.subscribers.Acquire(admission.ClientIP(r.RemoteAddr))
	if err != nil {
		http.Error(w, err.Error(), http.StatusTooManyRequests)
		return
	}
	defer release()
	if !s.awaitCatchUp(r.Context()) {
		return
	}
	sub, snapJSON, replay, revision, ok := s.snapshots.Subscribe(r.Context(), s.hub, prefix, s.buildSnapshot)
	if !ok {
		return
	}
	defer s.hub.Unsubscribe(sub)
	dashboard.Stream{Sub: sub, Snapshot: snapJSON, Replay: replay, Revision: revision,
		Frame: s.dashboardFrame, Slot: s.fanout.Acquire}.Serve(r.Context(), wr)
}

// buildSnapshot builds the dashboard snapshot of prefix: the JSON of the
// current leases under it (at most ListLimit) and the revision it reflects.
// ok is false if ctx ends while it waits for a slot.
func (s *Server) buildSnapshot(ctx context.Context, prefix string) (snapJSON []byte, revision uint64, ok bool) {
	// Building a snapshot costs O(ListLimit) memory and CPU; at most
	// snapshotSlots are built at once (of different prefixes).
	select {
	case s.snapshotSlots <- struct{}{}:
	case <-ctx.Done():
		return nil, 0, false
	}
	defer func() { <-s.snapshotSlots }()
	// And it is a read like a List: it waits for a read slot too.
	release, err := s.reads.Acquire(ctx)
	if err != nil {
		return nil, 0, false
	}
	defer release()
	view := s.fsm.View()
	leases := view.List(prefix, s.cfg.ListLimit)
	remaining := s.expirer.RemainingOf(leases, s.expirer.Now())
	wire := make([]*fencedv1.Lease, len(leases))
	for i, l := range leases {
		wire[i] = api.WireLease(l, remaining[i], api.PublicView)
	}
	revision = view.Applied()
	return dashboard.SnapshotJSON(revision, wire), revision, true
}

// dashboardFrame is the dashboard's "lease" frame of ev, with the lease's
// remaining time as this node knows it.
func (s *Server) dashboardFrame(ev lease.Event) []byte {
	return dashboard.LeaseFrame(ev, s.currentLease(ev.Lease, api.PublicView))
}
