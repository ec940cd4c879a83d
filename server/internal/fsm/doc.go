// Package fsm is a fenced node's raft state machine: it applies the log's
// lease commands to a lease.State and the members' client URL entries to
// a map beside it, snapshots and restores both, and serves the node's
// reads of them.
//
// Guarantees:
//   - Apply is deterministic: nodes that apply the same log hold the same
//     state, whose snapshots are the same bytes. An entry that does not
//     decode changes nothing and answers an error.
//   - A batch is applied under one lock: a read sees the state before or
//     after the whole batch, never part of it. Reads see applied entries
//     only, never ones merely committed or proposed.
//   - Hooks.Events sees the transitions of each batch together, in log
//     order, after the lock is released; the next batch waits for it.
//   - A snapshot holds the leases, the last tokens of freed keys, the index
//     of the last applied command and the members' client URLs, taken in
//     O(1) under the read lock. Restore accepts one, or a lease snapshot
//     alone (an older fenced's, a backup), and replaces the state only if
//     the whole snapshot reads.
//   - Revision and ReadRevision are the index of the last applied command
//     (at least 1): a Watch after it neither misses nor repeats an event.
//
// Not guaranteed: nothing here knows about leadership, deadlines or
// expiry timers, clocks, wait queues or who is allowed what; a lease is
// current here until an entry ends it, however long ago its TTL passed.
// Durability and ordering of the log are raft's. Member entries do not
// advance the revision, and a client URL is what its member said.
// Snapshot and restore counts, and LastIndex, cover this process only.
package fsm
