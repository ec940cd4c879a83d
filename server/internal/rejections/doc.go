// Package rejections keeps the stale rejections that resources report
// (RejectionService) and relays them between nodes: the book that counts
// them, the checks a report passes before anything is counted, the relay
// that follows the leader's rejections for a node's watchers, the
// dashboard's JSON view of a list, and the grant memory that lets a
// report's tokens name the owners they were granted to.
//
// Guarantees: Validate checks every entry of a report before any is
// recorded, so that a node records a report whole or not at all. The book is bounded: the
// newest MaxEntries entries (one per scope, resource and presented token),
// counts for the 10,000 scopes and 1,000 resources rejected most recently,
// and a resource label of its own for the first 32 resources seen, later
// ones counting as "other". A Relay runs only while it has watchers, in
// one goroutine started through its Spawn when the first joins, which ends
// when the last leaves or its Base context ends. A GrantMemory finds
// every grant recorded among the newest 16 of its key, of the 10,000 keys
// granted most recently, and holds no more.
//
// Not guaranteed: rejections are diagnostics, kept in memory only, never in
// the log: a new leader starts from nothing, and the relay replays nothing,
// so rejections recorded while it is not open (from an election until it
// reaches the new leader, while no leader is known) or that a relay falling
// behind loses are not relayed. The grant memory knows only the grants its
// node applied, and no time for those replayed at start. Feeding it,
// resolving tokens it forgot (to the current lease), authorization and
// forwarding to the leader are the node's.
package rejections
