// Package contact is a node's raft transport: it records when each peer
// last answered, so that a leadership check can require a quorum contact
// that began after the check, and it keeps a member that may not vote out
// of elections.
//
// Renewals need a quorum contact that began after they arrived. raft's
// VerifyLeader counts any heartbeat answer that comes in after the check
// began, including one to a heartbeat sent before it began. A leader
// paused with such an answer in flight (SIGSTOP, a long GC) could, on
// resuming, confirm a renewal on the strength of a contact older than the
// renewal, after a new leader had been elected and had reset the deadlines
// without it. So a leadership check of the node also requires that a
// quorum of voters (this node among them) answered, in the current term,
// an AppendEntries that was sent after the check began.
//
// Guarantees: [Transport.QuorumSince] counts a peer only for an
// AppendEntries of the asked term, answered in that term, whose request was
// sent after the asked moment; a later answer to an earlier request never
// moves a peer's contact back. While the member may not vote, vote and
// pre-vote requests to it are refused before raft sees them, a leadership
// handover to it fails, and it asks for no votes.
//
// Not guaranteed: that this node leads. The package knows nothing of raft's
// configuration or state: the caller passes the voters and the term, and
// confirms leadership with raft itself (server's verifyLeader, coalesced
// by internal/leadercheck).
package contact
