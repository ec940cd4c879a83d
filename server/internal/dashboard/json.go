package dashboard

import (
	"encoding/json"
	"fmt"
	"strconv"

	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/lease"
)

// leaseJSON is a lease as the dashboard reads it: the public view, no
// lease ID. Tokens are strings because JavaScript numbers lose precision
// above 2^53.
type leaseJSON struct {
	Key         string `json:"key"`
	Owner       string `json:"owner"`
	Token       string `json:"token"`
	TTLMs       int64  `json:"ttlMs"`
	RemainingMs int64  `json:"remainingMs"`
}

func toJSON(p *fencedv1.Lease) leaseJSON {
	return leaseJSON{Key: p.GetKey(), Owner: p.GetOwner(), Token: strconv.FormatUint(p.GetToken(), 10),
		TTLMs: p.GetTtlMs(), RemainingMs: p.GetRemainingMs()}
}

// SnapshotJSON is the data of a "snapshot" event: the leases, in their
// public wire form, as of revision.
func SnapshotJSON(revision uint64, leases []*fencedv1.Lease) []byte {
	snap := struct {
		Revision uint64      `json:"revision"`
		Leases   []leaseJSON `json:"leases"`
	}{Revision: revision, Leases: make([]leaseJSON, len(leases))}
	for i, l := range leases {
		snap.Leases[i] = toJSON(l)
	}
	b, _ := json.Marshal(snap)
	return b
}

// LeaseFrame is the "lease" event of ev, whose lease has the public wire
// form l.
func LeaseFrame(ev lease.Event, l *fencedv1.Lease) []byte {
	b, _ := json.Marshal(struct {
		Type     string    `json:"type"`
		Revision uint64    `json:"revision"`
		Lease    leaseJSON `json:"lease"`
	}{eventTypeName(ev.Type), ev.Revision, toJSON(l)})
	return frame("lease", b)
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

// frame is one server-sent event.
func frame(event string, data []byte) []byte {
	return fmt.Appendf(nil, "event: %s\ndata: %s\n\n", event, data)
}
