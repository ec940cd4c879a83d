// Package dashboard is the node's web dashboard: its page, and the
// encoding of the event stream the page reads (GET /v1/events): the JSON
// of a lease, of a snapshot and of a transition, server-sent event frames,
// and the loop that writes a stream from a fanout.Subscription.
//
// Guarantees: a stream sends the snapshot first, then the transitions
// after the snapshot's revision in order, each once; a transition at or
// before it is never sent. Writes are spaced at least 50ms apart, the
// transitions of the meanwhile going out together, and each write must
// finish within the stream's write timeout or the stream ends. A stream
// whose subscription was cut off is sent "resync" and ends. Tokens are
// JSON strings, exact beyond 2^53. Every write of transitions waits for a
// fan-out slot.
//
// Not guaranteed: every transition reaches a dashboard; one that falls
// behind is cut off and reconnects to a new snapshot. Authorization,
// stream limits, and the building of a snapshot (what is read, and under
// which slots) are the node's.
package dashboard
