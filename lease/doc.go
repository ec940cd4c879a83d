// Package lease is the lease state machine of fenced: the deterministic core
// that every node applies in log order. It also defines the invariants I1 to
// I7 that the rest of fenced cites by number.
//
// The state machine grants, releases and expires leases. It never reads a
// clock and does no I/O: whatever depends on time (lease IDs, the decision to
// expire) is decided by the leader and carried in the [Command]. Applying
// the same commands at the same log indexes to the same snapshot always
// yields the same state and results.
//
// Fencing tokens are log indexes: the token of a grant is the index of the
// log entry that made it. Log indexes only grow, across restarts, snapshots
// and leader changes, so every grant of a key gets a token greater than all
// tokens issued before for any key (I1), and no per-key counter has to be
// remembered. That is what lets the state machine forget idle keys: it
// keeps the last token of at most MaxIdleKeys recently freed keys, for Get,
// and drops the oldest beyond that without weakening I1.
//
// # Invariants
//
// None of these is given up under any fault fenced is built to survive
// (docs/guarantees.md says the same, with the faults):
//
//   - I1 tokens only grow. Every acquisition of key K returns a token
//     strictly greater than every token ever returned for K, across release,
//     expiry, restart, kill -9, snapshots, leader changes and the forgetting
//     of idle keys. Tokens are uint64 log indexes: unique across all keys,
//     above 0, not dense.
//   - I2 renewal keeps the token. Renewing extends the same ownership epoch;
//     only a new acquisition brings a new token.
//   - I3 one lease at a time. At any instant the service considers at most
//     one lease current per key, and a grant is acknowledged only after it
//     is fsynced (and, in a cluster, committed by a quorum).
//   - I4 lease management checks identity. Renew and release need the lease
//     ID (128 random bits) of the current holder; a stale client can never
//     renew or release a newer holder's lease.
//   - I5 the guard rule. A guard accepts a mutation for scope S if and only
//     if its token is at least the highest token it has accepted for S, and
//     then records that token as the highest; the check and the mutation
//     are atomic with respect to every other mutation of S, and the highest
//     token is exactly as durable as the data it protects.
//   - I6 scopes are independent. A token for key K fences only scope K.
//   - I7 stale is terminal. A holder that gets a stale-token rejection treats
//     its authority as lost: it does not retry with the same token, and
//     nothing re-acquires the key behind its back to push the old operation
//     through.
//
// I1 to I4 are this package's; I5 is the guards' (package fence), I7 the
// client's and the guards' lease-taking calls'.
//
// # Safety
//
// Guarantees:
//   - At most one current lease per key (I3); tokens strictly increase per
//     key, and in fact across all keys: every entry grants at most one lease.
//   - Release, revocation and expiry take effect only for the lease ID they
//     name (I4): a stale holder's release, a revocation decided on an older
//     lease or a late expiry never ends a newer lease.
//   - A revocation ([OpRevoke]) records the principal that asked
//     (Command.By, Event.By) in the log; it ends the lease as a release does.
//   - An expiry batch ([OpExpireBatch]) takes effect only in an entry of the
//     leadership term that decided it (Command.Term), so a deposed leader's
//     late decision, written after it leads again, ends nothing.
//
// Non-guarantees:
//   - Tokens are not dense: consecutive grants of a key may differ by more
//     than one.
//   - [State.LastToken] of a key freed long ago may be 0 once the key was
//     forgotten.
//   - Renewal is not a command: deadlines live with the leader, outside the
//     state machine. The leader keeps them in the state's records of the
//     leases ([Held]), in fields the state machine never reads or writes
//     and snapshots leave out.
//   - Single [OpExpire] entries, which logs written before expiry batches
//     may hold, carry no term and apply in any term.
//   - I1 across a restore from a backup ([Snapshot.Backup], [State.Rebase])
//     holds only if the old cluster wrote fewer entries after the backup
//     than the margin the restore skipped ([DefaultRestoreBump] by default).
//
// # Cost
//
// Leases are kept in one persistent ordered index: a lookup costs
// O(log n), [State.View] takes a frozen view in O(1), which stays valid and
// unchanged while the state moves on, and [State.List] costs
// O(log n + answer). Snapshots write leases in key order, so equal states
// write equal bytes. A lease's record ([Held]) is stored once and its
// Lease never modified; [Event.Held] and [State.EachHeld] hand out the
// record itself, for holders of every current lease that should not keep
// a copy of each.
//
// # Compatibility
//
// Entries of a newer layout ([OpRevoke] is version 4) are refused with
// [ErrBadCommand] by builds that predate it, which then do not apply them:
// every node of a cluster must run a build that knows OpRevoke before
// anyone revokes.
package lease
