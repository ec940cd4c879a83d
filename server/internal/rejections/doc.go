// Package rejections keeps the stale rejections that resources report
// (RejectionService) and relays them between nodes: the Connect service
// that takes reports and lists them, forwarding both to the leader; the
// book that counts them; the checks a report passes before anything is
// counted; the relay that follows the leader's rejections for a node's
// watchers, and the leader's side of it (ServeRelay); the dashboard's JSON
// view of a list; and the grant memory that lets a report's tokens name
// the owners they were granted to.
//
// Guarantees: Validate checks every entry of a report before any is
// recorded, so that a node records a report whole or not at all. A Service
// checks a report's entries, then the caller's permission for each
// scope, before it records or forwards anything, and a list's prefix, limit
// and permission before it answers or forwards; every report is counted
// once by outcome (invalid, denied, recorded) on the node that took it;
// its errors reach the caller through the node's Wire, and a forwarded
// call's answer (or its failure, as the node's Forward gives it) as it
// came. The book is bounded: the
// newest MaxEntries entries (one per scope, resource and presented token),
// counts for the 10,000 scopes and 1,000 resources rejected most recently,
// and a resource label of its own for the first 32 resources seen, later
// ones counting as "other". A Relay runs only while it has watchers, in
// one goroutine started through its Spawn when the first joins, which ends
// when the last leaves or its Base context ends. ServeRelay sends only
// REJECTED events, and goes on past a gap when it falls behind. A
// GrantMemory finds every grant recorded among the newest 16 of its key,
// of the 10,000 keys granted most recently, and holds no more.
//
// Not guaranteed: rejections are diagnostics, kept in memory only, never in
// the log: a new leader starts from nothing, and the relay replays nothing,
// so rejections recorded while it is not open (from an election until it
// reaches the new leader, while no leader is known) or that a relay falling
// behind loses are not relayed. The grant memory knows only the grants its
// node applied, and no time for those replayed at start. Feeding it,
// resolving tokens it forgot (to the current lease), the wire rules of keys,
// owners and text, authorization, who leads and how a call reaches it, and
// the HTTP stack the service is mounted on (authentication, body limits)
// are the node's.
package rejections
