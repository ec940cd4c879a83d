package dashboard

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/lease"
	"github.com/fencedio/fenced/server/internal/fanout"
	"github.com/fencedio/fenced/server/internal/streamwrite"
)

// maxBuilds bounds the dashboard snapshots built at once; one per core of
// a small machine keeps the rest of the CPU for the write path.
const maxBuilds = 2

// Node is what the dashboard's HTTP side needs of the node it shows.
type Node struct {
	// Stats is the answer to GET /v1/stats, encoded as JSON.
	Stats func() any
	// CheckPrefix checks the ?prefix= of GET /v1/events (the rules of a
	// key); its error is answered 400 Bad Request.
	CheckPrefix func(prefix string) error
	// Admit takes one of the event-stream slots for the client of r and
	// returns its release; its error is answered 429 Too Many Requests.
	Admit func(r *http.Request) (release func(), err error)
	// CaughtUp waits until the node has applied the log it held at start,
	// and reports false if ctx ends first. A stream sends nothing before.
	CaughtUp func(ctx context.Context) bool
	// Hub is the fan-out of the node's transitions.
	Hub *fanout.Hub
	// Leases returns the current leases under prefix (at most the node's
	// list limit), in their public wire form with the time each has left,
	// and the revision they reflect.
	Leases func(prefix string) (leases []*fencedv1.Lease, revision uint64)
	// Lease is the public wire form of a lease, with its remaining time as
	// the node knows it.
	Lease func(lease.Lease) *fencedv1.Lease
	// ReadSlot waits for a read slot and returns its release: a snapshot is
	// a read like a List.
	ReadSlot func(ctx context.Context) (release func(), err error)
	// FanoutSlot waits for a fan-out slot (Stream.Slot).
	FanoutSlot func(ctx context.Context) (release func(), err error)
	// WriteTimeout bounds each write to a stream (NewWriter).
	WriteTimeout time.Duration
	// MaxUnacked bounds the bytes a stream's connection may hold
	// unacknowledged (streamwrite.NewUnacked): a stream past it is sent
	// "resync" and ended.
	MaxUnacked int
	// Cut counts a stream cut for exceeding MaxUnacked.
	Cut func()
}

// Handler serves the dashboard of a node: the page, GET /v1/stats and
// GET /v1/events.
type Handler struct {
	node Node
	// building bounds the snapshots built at once.
	building chan struct{}
	// snapshots shares snapshots between the dashboards that connect
	// together.
	snapshots fanout.SnapshotShare
}

// New returns the dashboard of node.
func New(node Node) *Handler {
	return &Handler{node: node, building: make(chan struct{}, maxBuilds)}
}

// Register adds the dashboard's routes to mux.
func (h *Handler) Register(mux *http.ServeMux) {
	ui := Files()
	mux.Handle("GET /{$}", http.FileServerFS(ui))
	mux.Handle("GET /ui/", http.StripPrefix("/ui/", http.FileServerFS(ui)))
	mux.HandleFunc("GET /v1/stats", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(h.node.Stats())
	})
	mux.HandleFunc("GET /v1/events", h.serveEvents)
}

// serveEvents streams lease transitions as server-sent events: first a
// "snapshot" event with every current lease under ?prefix= (at most
// ListLimit), then one "lease" event per transition after it. A watcher that
// falls behind gets a "resync" event and should reconnect. A node that has
// not yet applied the log it held at start sends nothing until it has
// (Node.CaughtUp).
func (h *Handler) serveEvents(w http.ResponseWriter, r *http.Request) {
	wr := NewWriter(w, h.node.WriteTimeout, streamwrite.NewUnacked(r.Context(), h.node.MaxUnacked, h.node.Cut))
	if wr == nil {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	prefix := r.URL.Query().Get("prefix")
	if prefix != "" {
		if err := h.node.CheckPrefix(prefix); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
	}
	release, err := h.node.Admit(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusTooManyRequests)
		return
	}
	defer release()
	if !h.node.CaughtUp(r.Context()) {
		return
	}
	sub, snapJSON, replay, revision, ok := h.snapshots.Subscribe(r.Context(), h.node.Hub, prefix, h.buildSnapshot)
	if !ok {
		return
	}
	defer h.node.Hub.Unsubscribe(sub)
	Stream{Sub: sub, Snapshot: snapJSON, Replay: replay, Revision: revision,
		Frame: h.leaseFrame, Slot: h.node.FanoutSlot}.Serve(r.Context(), wr)
}

// buildSnapshot builds the dashboard snapshot of prefix: the JSON of the
// current leases under it (at most ListLimit) and the revision it reflects.
// ok is false if ctx ends while it waits for a slot.
func (h *Handler) buildSnapshot(ctx context.Context, prefix string) (snapJSON []byte, revision uint64, ok bool) {
	// Building a snapshot costs O(ListLimit) memory and CPU; at most
	// maxBuilds are built at once (of different prefixes).
	select {
	case h.building <- struct{}{}:
	case <-ctx.Done():
		return nil, 0, false
	}
	defer func() { <-h.building }()
	// And it is a read like a List: it waits for a read slot too.
	release, err := h.node.ReadSlot(ctx)
	if err != nil {
		return nil, 0, false
	}
	defer release()
	wire, revision := h.node.Leases(prefix)
	return SnapshotJSON(revision, wire), revision, true
}

// leaseFrame is the dashboard's "lease" frame of ev, with the lease's
// remaining time as the node knows it.
func (h *Handler) leaseFrame(ev lease.Event) []byte {
	return LeaseFrame(ev, h.node.Lease(ev.Lease))
}
