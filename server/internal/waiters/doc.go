// Package waiters keeps the acquisitions that wait for held keys, in line
// per key, and the handovers of a freed key to the first of them.
//
// Guarantees: waiters for a key are served first come first served: only
// the head of a line tries to acquire (NextStep), and it is signalled
// (Ready) when the key may be free (Freed, FreedAll), when it becomes the
// head, and when a handover to it is decided. A release or expiry may
// claim the head (Claim) and grant it the key in the same log entry, under
// the lease ID the claim chose; a claimed waiter stays in line and cannot
// leave (Abandon says so) until the handover is settled (Settle, or
// Granted as soon as its grant is applied), so that a grant always reaches
// its waiter. Offered names the lease IDs of every handover that claimed a
// waiter, also those settled as failed; a waiter whose handover failed
// with its outcome unknown leaves the line (MaybeGranted) and is offered
// no other grant, so that one waiter never gets two. A waiter is counted
// against its holder, its client address and the total (Limits) under the
// same lock that adds it, and refused with a *LimitError beyond any of
// them; it stops counting when it leaves or is handed its lease. No method
// blocks while holding the lock: signals coalesce, one may stand for
// several.
//
// Not guaranteed: the queues know nothing of the state machine: whether a
// key is free is the node's to say, and a signalled head must still try to
// acquire and may fail. First come first served holds among waiters only:
// an acquisition that does not wait may take a freed key before the head.
// Lines live in the memory of one process and are neither logged nor
// replicated: another node knows nothing of them, a restarted one starts
// with none, and how long a waiter waits is its caller's to bound.
package waiters
