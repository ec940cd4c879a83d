// Package leadercheck coalesces confirmations that a raft node still
// leads.
//
// Guarantees: every caller of [Check.Confirm] is answered by a round that
// started after it called, so a confirmation covers the caller's moment;
// callers that arrive while a round runs share the next one. A caller whose
// context ends gets its error: nothing was confirmed for it.
//
// Not guaranteed: a round is only as good as its Verify (raft's
// VerifyLeader, or the node's own state for a sole voter); the package
// knows nothing of raft, terms or leases.
package leadercheck
