// Package lease is the lease state machine of fenced: the deterministic core
// that every node applies in log order.
//
// The state machine grants, releases and expires leases. It never reads a
// clock and does no I/O: whatever depends on time (lease IDs, the decision to
// expire) is decided by the leader and carried in the Command. Applying the
// same commands at the same log indexes to the same snapshot always yields
// the same state and results.
//
// Fencing tokens are log indexes: the token of a grant is the index of the
// log entry that made it. Log indexes only grow, across restarts, snapshots
// and leader changes, so every grant of a key gets a token greater than all
// tokens issued before for any key (invariant I1), and no per-key counter has
// to be remembered. That is what lets the state machine forget idle keys: it
// keeps the last token of at most MaxIdleKeys recently freed keys, for Get,
// and drops the oldest beyond that without weakening I1.
//
// Guarantees:
//   - At most one current lease per key (I3).
//   - Tokens strictly increase per key, and in fact across all keys: every
//     entry grants at most one lease.
//   - Release, revocation and expiry take effect only for the lease ID they
//     name (I4): a stale holder's release, a revocation decided on an older
//     lease or a late expiry never ends a newer lease.
//   - A revocation (OpRevoke) records the principal that asked (Command.By,
//     Event.By) in the log; it ends the lease as a release does.
//   - An expiry batch (OpExpireBatch) takes effect only in an entry of the
//     leadership term that decided it (Command.Term), so a deposed leader's
//     late decision, written after it leads again, ends nothing.
//   - Leases are kept in one persistent ordered index: a lookup costs
//     O(log n), View takes a frozen view in O(1), which stays valid and
//     unchanged while the state moves on, and List costs O(log n + answer).
//     Snapshots write leases in key order, so equal states write equal
//     bytes.
//   - A stored lease is never modified; Event.Shared and State.EachShared
//     hand out the state's own copy, for holders of every current lease
//     that should not keep a copy of each.
//
// Non-guarantees:
//   - Tokens are not dense: consecutive grants of a key may differ by more
//     than one.
//   - LastToken of a key freed long ago may be 0 once the key was forgotten.
//   - Renewal is not a command: deadlines live with the leader, outside the
//     state machine.
//   - Single OpExpire entries, which logs written before expiry batches may
//     hold, carry no term and apply in any term.
//   - Entries of a newer layout (OpRevoke is version 4) are refused with
//     ErrBadCommand by builds that predate it, which then do not apply
//     them: every node of a cluster must run a build that knows OpRevoke
//     before anyone revokes.
//   - I1 across a restore from a backup (Snapshot.Backup, State.Rebase)
//     holds only if the old cluster wrote fewer entries after the backup
//     than the margin the restore skipped (DefaultRestoreBump by default).
package lease
