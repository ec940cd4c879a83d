// Package dashboard is the node's web dashboard: its HTTP side (the page,
// GET /v1/stats and GET /v1/events), the building and sharing of the
// snapshots a stream starts from, and the encoding of the event stream the
// page reads: the JSON of a lease, of a snapshot and of a transition,
// server-sent event frames, and the loop that writes a stream from a
// fanout.Subscription. The node passes what it needs as a Node of
// functions: its stats, the prefix rules, the stream limits, the catch-up
// wait, the fan-out hub, its leases and their remaining times, and its
// read and fan-out slots.
//
// Guarantees: a stream is refused (400) for a prefix the node rejects and
// (429) beyond the node's stream limits, and sends nothing before the node
// has caught up with its log. It sends the snapshot first, then the
// transitions after the snapshot's revision in order, each once; a
// transition at or before it is never sent. Dashboards that connect while
// a snapshot of their prefix is built share it; at most two snapshots are
// built at once, each within one of the node's read slots. Writes are
// spaced at least 50ms apart, the transitions of the meanwhile going out
// together, and each write must finish within the stream's write timeout
// or the stream ends. A stream whose subscription was cut off is sent
// "resync" and ends, as is one whose connection holds more than the node's
// bound unacknowledged (Node.MaxUnacked): its writes are at most half the
// bound, each made only while it holds less, so "resync" still fits. Tokens are JSON strings, exact beyond 2^53; lease IDs
// are never sent. Every write of transitions waits for a fan-out slot.
//
// Not guaranteed: every transition reaches a dashboard; one that falls
// behind is cut off and reconnects to a new snapshot. Authorization of
// /v1/events (the node wraps its whole mux), the stream limits, what the
// node's leases and stats are, and how much of the CPU its slots allow,
// are the node's.
package dashboard
