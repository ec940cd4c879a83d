package server

import (
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"strconv"
	"time"

	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/lease"
	"github.com/fencedio/fenced/server/internal/fanout"
)

//go:embed ui
var uiFiles embed.FS

// leaseJSON is a lease as the dashboard endpoints write it: the public view
// (no lease ID, see view). Tokens are strings because JavaScript numbers lose
// precision above 2^53.
type leaseJSON struct {
	Key         string `json:"key"`
	Owner       string `json:"owner"`
	Token       string `json:"token"`
	TTLMs       int64  `json:"ttlMs"`
	RemainingMs int64  `json:"remainingMs"`
}

func dashboardLease(p *fencedv1.Lease) leaseJSON {
	return leaseJSON{Key: p.GetKey(), Owner: p.GetOwner(), Token: strconv.FormatUint(p.GetToken(), 10),
		TTLMs: p.GetTtlMs(), RemainingMs: p.GetRemainingMs()}
}

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
		Ready: s.Ready(), Waiters: s.waiters.len(),
		Term: s.raft.CurrentTerm(), CommitIndex: s.raft.CommitIndex(), AppliedIndex: s.raft.AppliedIndex(),
		Acquired: s.counts.acquired.Load(), Released: s.counts.released.Load(),
		Expired: s.counts.expired.Load(), Takeovers: s.counts.takeovers.Load(),
	}
	st.Leases = s.fsm.view().Len()
	return st
}

func (s *Server) registerDashboard(mux *http.ServeMux) {
	ui, _ := fs.Sub(uiFiles, "ui")
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
// falls behind gets a "resync" event and should reconnect.
func (s *Server) serveEvents(w http.ResponseWriter, r *http.Request) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	prefix := r.URL.Query().Get("prefix")
	if prefix != "" {
		if err := validateKey(prefix); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
	}
	release, err := s.subscribers.acquire(clientIP(r.RemoteAddr))
	if err != nil {
		http.Error(w, err.Error(), http.StatusTooManyRequests)
		return
	}
	defer release()
	sub, snapJSON, replay, revision, ok := s.snapshots.Subscribe(r.Context(), s.hub, prefix, s.buildSnapshot)
	if !ok {
		return
	}
	defer s.hub.Unsubscribe(sub)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	write := s.sseWriter(w, flusher)
	// Reconnect a second after a lost connection (browsers default to 3s).
	frames := [][]byte{[]byte("retry: 1000\n\n"), sseFrame("snapshot", snapJSON)}
	for _, ev := range replay { // the transitions since a shared snapshot
		frames = append(frames, ev.Frame(s.sseLeaseEvent))
	}
	slot, err := s.fanout.Acquire(r.Context()) // sending it is fan-out too
	if err != nil {
		return
	}
	ok = write(frames...)
	slot()
	if !ok {
		return
	}
	snapJSON, replay, frames = nil, nil, nil
	keepalive := time.NewTicker(15 * time.Second)
	defer keepalive.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-keepalive.C:
			if !write([]byte(": keepalive\n\n")) {
				return
			}
		case <-sub.Lost():
			write(sseFrame("resync", []byte("{}")))
			return
		case <-sub.Ready():
			if !s.sendTransitions(r.Context(), sub, revision, write) || !pause(r.Context(), eventsInterval) {
				return
			}
		}
	}
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
	view := s.fsm.view()
	leases := view.List(prefix, s.cfg.ListLimit)
	remaining := s.expirer.remainingOf(leases, s.expirer.now())
	snap := struct {
		Revision uint64      `json:"revision"`
		Leases   []leaseJSON `json:"leases"`
	}{Revision: view.Applied(), Leases: make([]leaseJSON, len(leases))}
	for i, l := range leases {
		snap.Leases[i] = dashboardLease(wireLease(l, remaining[i], publicView))
	}
	snapJSON, _ = json.Marshal(snap)
	return snapJSON, snap.Revision, true
}

// sendTransitions writes the transitions queued for sub after revision
// (those at or before it are in the snapshot), once a fan-out slot is free
// (internal/sharegate): under overload a dashboard falls behind, and is sent a
// resync past WatchBuffer transitions, rather than the write path slowing
// down. It reports success.
func (s *Server) sendTransitions(ctx context.Context, sub *fanout.Subscription, revision uint64, write func(...[]byte) bool) bool {
	release, err := s.fanout.Acquire(ctx)
	if err != nil {
		return false
	}
	defer release()
	evs := sub.Take()
	defer sub.Recycle(evs)
	frames := make([][]byte, 0, len(evs))
	for _, ev := range evs {
		if ev.Revision > revision {
			frames = append(frames, ev.Frame(s.sseLeaseEvent))
		}
	}
	return len(frames) == 0 || write(frames...)
}

// eventsInterval is the least time between two writes to a dashboard
// stream: the transitions meanwhile go out together. A page needs no more
// than 20 updates a second, and 50 dashboards no longer cost a write and a
// system call each per transition. It stays far below what fills a
// subscriber's queue (WatchBuffer events) at any write rate the server
// sustains.
const eventsInterval = 50 * time.Millisecond

// pause waits for d, or reports false when ctx ends first.
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// sseWriter returns a function that writes and flushes frames to w, each
// write within StreamWriteTimeout: a dashboard that stops reading is cut
// off instead of holding its goroutine forever. It reports success.
func (s *Server) sseWriter(w http.ResponseWriter, flusher http.Flusher) func(frames ...[]byte) bool {
	rc := http.NewResponseController(w)
	return func(frames ...[]byte) bool {
		if s.cfg.StreamWriteTimeout > 0 {
			rc.SetWriteDeadline(time.Now().Add(s.cfg.StreamWriteTimeout))
		}
		for _, p := range frames {
			if _, err := w.Write(p); err != nil {
				return false
			}
		}
		flusher.Flush()
		return true
	}
}

// sseFrame is one server-sent event.
func sseFrame(event string, data []byte) []byte {
	return fmt.Appendf(nil, "event: %s\ndata: %s\n\n", event, data)
}

// sseLeaseEvent is the dashboard's "lease" frame of ev, made once per event
// and shared by every subscriber (fanout.Event.Frame).
func (s *Server) sseLeaseEvent(ev lease.Event) []byte {
	b, _ := json.Marshal(struct {
		Type     string    `json:"type"`
		Revision uint64    `json:"revision"`
		Lease    leaseJSON `json:"lease"`
	}{eventTypeName(ev.Type), ev.Revision, dashboardLease(s.currentLease(ev.Lease, publicView))})
	return sseFrame("lease", b)
}

func eventTypeName(t lease.EventType) string {
	switch t {
	case lease.Acquired:
		return "ACQUIRED"
	case lease.Released:
		return "RELEASED"
	case lease.Expired:
		return "EXPIRED"
	}
	return "UNKNOWN"
}
