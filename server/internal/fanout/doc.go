// Package fanout delivers a node's lease transitions to its watchers and
// dashboards: the hub that queues applied events for every subscription,
// the codecs that encode a shared Watch message once for all watchers, the
// batching of a watcher's queued events into one write, and the sharing of
// dashboard snapshots between dashboards that connect together.
//
// Guarantees: publishing never blocks the apply path on watchers. A
// subscription is offered the transitions under its prefix after its
// starting revision in revision order, each exactly once, until it falls
// more than the buffer behind; then it is cut off (Lost) and told nothing
// more, so that it resyncs. Subscribing after a revision replays the kept
// transitions after it and reports whether some may be missing (evicted
// from the history, or from before a restored snapshot). A REJECTED event
// carries the revision of the last transition dispatched before it, and
// goes only to subscriptions that asked for rejections.
//
// Not guaranteed: delivery to a subscription that was cut off, or of
// events older than the history; REJECTED events are not kept for replay.
// When an event is dispatched depends on the watchers, not on when it was
// published: rounds are spaced up to 50ms, and while nobody watches,
// transitions enter the history by the batch or when one subscribes.
package fanout
