// Package netfault is the harness's network faults, two proxies on
// loopback: a DelayProxy in front of the reference store holds each write
// past its lease's expiry and then delivers it (a packet stuck in the
// network), and a LinkProxy in front of every cluster node's raft port
// drops, black-holes or delays each directed link between nodes as the
// Network says (partitions, slow links).
//
// # Guarantees
//
//   - A delayed write is delivered whether or not its sender still waits,
//     and Drain returns what became of every one of them.
//   - A LinkProxy tells nodes apart by the source address of their
//     connections (NodeIP), so it needs each node to dial from its own
//     loopback address; a dropped link closes its open connections, and
//     Heal closes those whose bytes were thrown away, so that nothing
//     travels on a connection that lost data.
//
// # Non-guarantees
//
//   - Faults act on connections and byte chunks, not packets: no
//     reordering, duplication or corruption inside a TCP stream.
//   - Only loopback: NodeIP needs 127.0.0.0/8 routed to loopback (Linux).
package netfault
