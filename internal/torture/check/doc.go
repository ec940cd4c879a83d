// Package check judges a torture run's history: it takes the merged
// history of the workers (package history) and the evidence read back
// from the resources (Evidence), and returns one Result per checker. It
// starts no process and opens no connection; the clock only bounds the
// linearizability search (one that runs out is reported unknown); only
// LinearizablePerKey writes a file (porcupine's visualization of a
// failure), into the directory it is given.
//
// # Checkers
//
//   - store-no-stale-overwrite, postgres-no-stale-overwrite,
//     redis-no-stale-overwrite (StoreOrder, SQLOrder, RedisOrder): per
//     scope, in commit order, no accepted write carries a token below one
//     accepted before it.
//   - sequenced-writes-at-most-once (Sequences): a write that carried a
//     sequence is in the store's audit, the PostgreSQL table and the Redis
//     lists at most once per (scope, token, sequence), however often the
//     worker resent it (Op.ResendOf); the note counts the resends.
//   - token-provenance (Provenance): every accepted write carries a token
//     that the lease service granted, for that key, to the worker that
//     sent it.
//   - tokens-unique-and-ordered (Tokens): no token was granted twice; per
//     key, a grant that returned before another began has the lower token.
//   - acked-writes-present (AckedPresent): every acknowledged write is in
//     the resource at the end.
//   - lease-linearizable (Linearizability, LinearizablePerKey): acquire,
//     renew, release and get, per key, are linearizable (porcupine), with
//     expiry as a nondeterministic step and acquisitions of unknown outcome
//     pending until the end of the history; each key's history is checked
//     in windows cut at quiescent points, each from an over-approximation
//     of the key's state at its start.
//   - lease-exclusion (Exclusion): no lease was granted to another holder
//     before the previous holder's conservative deadline (TTL after the
//     send time of its last acknowledged renewal) or release.
//   - renewals-honoured (Renewals): no renewal or release of a lease was
//     answered "not found" before TTL after the send time of its last
//     acknowledged grant or renewal, unless a release of it was sent.
//   - queue-messages-fenced (QueueMessages): the queue path's messages,
//     against the consumer's table and recorded decisions and what was
//     left in the queues: per scope, applied tokens never decrease in
//     commit order; no (scope, token, sequence) is applied twice; a stale
//     decision names a higher token that was applied, a duplicate one a
//     copy that was; no message the broker confirmed is lost.
//   - client-deadline-conservative (ClientDeadline): at every write, the
//     writer's local deadline is at most TTL after the send time of the
//     lease's last acknowledged grant or renewal answered before the write.
//
// # Guarantees
//
//   - Every checker is sound with respect to the history: outcomes the
//     harness cannot know (a request cut by a crash, a timed-out write)
//     are treated as possibly applied, never as failed, so a violation is
//     a real one. The only timing assumption is that all timestamps come
//     from one machine's clock; lease-exclusion allows 2ms plus 1000 ppm
//     of the TTL between that clock and the clock the server expires by.
//   - Each checker has tests that feed it a violating history and a
//     correct one (check_test.go, model_test.go, clientdeadline_test.go,
//     queue_test.go).
//
// # Non-guarantees
//
//   - A linearizability check that times out reports "unknown", not a
//     violation; the caller decides that such a run is not clean. An
//     anomaly that spans the cut between two windows of a key's history
//     may be missed.
//   - The checkers see only what the history and the evidence hold: a bug
//     that leaves no trace in them (an unsent request, a resource that
//     forgets its audit) is not found.
package check
