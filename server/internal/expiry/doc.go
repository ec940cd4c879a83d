// Package expiry keeps the leader's lease deadlines and decides when leases
// are due: the Expirer mirrors the current leases of the node's state
// machine (Add, Remove, Reset), extends them on renewal (Renew), and, while
// active as the leader of a term, hands due leases to the node's expire
// function, which writes their expiry to the log.
//
// Guarantees: deadlines are measured on the monotonic clock (as offsets
// from the process's start), so a step of the wall clock neither ends nor
// extends a lease; only a test's SetClock replaces it. A lease is due a
// full TTL after it was added, reset or last renewed; a renewal only moves
// its deadline forward, never back, and a lease whose deadline has passed
// cannot be renewed, whether or not its expiry has been written. A renewal
// of another term than the one last activated is refused (ErrOtherTerm).
// Only an active Expirer (Activate) hands leases to expire, each batch
// stamped with the term it was decided in; an inactive one keeps tracking
// deadlines and renewals, and on activation hands over at once what came
// due meanwhile. Due leases go out in batches of up to 1024 per expire call,
// at most 4 calls at once, so goroutines and memory stay flat however many
// leases come due together.
//
// Not guaranteed: the Expirer only schedules. A lease ends when the log
// entry that expire writes is applied, not when its deadline passes: until
// then the state machine still holds it, and a lease handed to expire is
// no longer tracked here whether or not that entry is ever applied (the
// Expirer does not retry it). Deadlines live in memory only and are
// neither logged nor replicated: when a node starts to lead, after a
// restart or a change of leader, it resets them, giving every lease a
// fresh full TTL from then, because it cannot know when the previous
// leader last renewed them; a lease so lives at least a full TTL past a
// leader change, however long before it was last renewed. Calls of
// expire still running when leadership is lost (Deactivate) run to their
// end; that the log refuses them, or that the state machine ignores an
// expiry of another term, is the node's to ensure.
package expiry
