// Package fence enforces fencing tokens at the resource, where writes land.
//
// A lease service decides who owns a scope; it cannot stop a paused process
// or a delayed packet from writing after its lease is gone. A [Guard] can:
// it applies a mutation for scope S only if the presented token is at least
// the highest token it has accepted for S, and then remembers the new token
// (invariant I5; the invariants are defined in package
// [github.com/fencedio/fenced/lease]). The check and the mutation are
// atomic with respect to other mutations of the same scope.
//
// Every guard takes a Config struct whose zero fields are the defaults
// documented on them: [NewMemory] takes a [MemoryConfig].
//
// # Safety
//
// Guarantees:
//   - A mutation presented with token t for scope S runs only if no mutation
//     with a token greater than t has been accepted for S.
//   - The highest token is recorded only when the mutation succeeds, and it is
//     exactly as durable as the guard's store: memory for NewMemory, the file
//     for the durable guard (package fence/fencebolt), the database for
//     fencesql and fenceredis.
//   - Scopes are independent: a token for one scope never fences another.
//   - Rejections return a [*StaleTokenError] that matches [ErrStaleToken].
//   - Every guard, the fencing header parsers and the lease service apply
//     one rule to scopes, [ValidateScope]: a lease key is a valid scope and
//     nothing else is. An invalid scope is refused before anything is
//     checked, applied or recorded.
//
// Non-guarantees:
//   - A Guard protects only mutations routed through it. Writes that bypass
//     the guard are not fenced.
//   - The in-memory guard forgets everything when the process exits; use it
//     only when the resource it protects is itself in memory, or when the
//     resource rebuilds its highest tokens on start.
//   - A guard does not know about leases. It trusts the token order; the
//     lease service is what makes tokens increase per key. Without signed
//     tokens anyone who reaches the resource can present any token, and one
//     huge token accepted once makes every legitimate token of its scope
//     stale.
//
// Signed tokens (opt-in): a guard wrapped by [NewSignedGuard] (fencesql and
// fenceredis take a Verifier in their Config) runs a mutation only if the
// token comes with a signature ([WithSignature]; the Fencing-Token-Signature
// header) that a trusted Ed25519 key made for that scope and that token.
// Missing, forged, re-scoped and re-tokened signatures, and those of
// retired keys, are refused with an error matching [ErrBadSignature] before
// the inner guard is asked anything, so they never move the highest token.
// The lease service signs with --signing-key-file and publishes its keys on
// /v1/keys ([ReadKeySet]).
//
// Equal tokens are accepted: the current holder writes many times with the
// same token.
//
// # Cost
//
// [Memory] serializes the mutations of one scope on a lock of its own,
// sharded so that unrelated scopes do not contend, and never forgets a
// scope: its size grows with the scopes it has seen. The durable and
// database guards pay a write of the highest token only when it rises
// (fencebolt: a commit and an fsync; see each package). Unsigned guards
// ignore signatures and cost nothing for them; a signed guard verifies one
// Ed25519 signature per mutation.
//
// # Sequences
//
// A write may also carry a sequence number ([WithSequence]): per scope a guard
// keeps the last sequence accepted under the highest token. A higher token
// starts a new epoch (any sequence accepted); under the same token a
// sequence must be above the last one, and one at or below it is a
// duplicate: not applied again, answered with an error matching
// ErrDuplicate, never ErrStaleToken. With strict sequences
// (MemoryConfig.StrictSequences, fencebolt.Config.StrictSequences, ...) only last+1
// passes and a gap is refused (ErrSequenceGap). A write without a sequence
// is decided as before. Retry re-sends one write with the same sequence
// after an unknown outcome and takes a duplicate for success, so a write is
// applied at most once. Not covered: several writers using one lease's
// sequences at once (a late lower sequence is then reported as a duplicate
// although it was never applied); see docs/guard-spec.md, section 7.
//
// # Leases
//
// [Lease] is the holder's side of a lease (key, token, MarkLost); *client.Lease
// satisfies it. Every guard has a lease-taking form beside its token-taking
// one ([DoLease] here and [Memory.DoLease]; fencebolt.Guard.DoLease and
// DoTxLease; fencesql.Guard.DoLease; fenceredis.Guard.WithLease; the fencehttp and
// fenceconnect client halves take a Lease too). It uses the lease's key as
// the scope and its token, and when the token is stale it calls the lease's
// MarkLost before returning the rejection, so the holder's context is cancelled
// and it cannot forget to stop (invariant I7). The token-taking forms are
// for callers without such a lease, such as a service that read a token from
// a request.
//
// A lease that knows its owner (Owned; *client.Lease does) also passes the
// owner on: the lease-taking calls put it in the context (LeaseContext), the
// client transports send it in the optional Fencing-Owner header, and the
// server halves read it back, so Decision.Owner names whose epoch a
// rejection fenced off. The owner is informational and never checked.
// fence/fencereport is an Observer that reports rejections to fenced, which
// shows them with both epochs' owners.
//
// The durable guard is fence/fencebolt, a package of its own so that this
// one does not link bbolt: its Do applies the mutation before it records
// the token, so a crash in between leaves the mutation applied and the token
// unrecorded; its DoTx, for data kept in the same file, commits both in one
// transaction. [NewSlogObserver] turns decisions into logs;
// fence/fenceprom.NewObserver turns them into Prometheus metrics (a package
// of its own, so that this one does not link the Prometheus client).
package fence
