// Package peers is a node's peer port and its identity as a member: the
// multiplexer that sorts peer connections into raft's and forwarded API
// calls ([Mux]), and the identity file of a data directory that says which
// cluster the member belongs to and whether it votes ([IdentityStore]).
//
// Guarantees:
//   - Every peer connection starts with a hello from each end; a connection
//     between members of two different clusters is refused on both ends
//     before raft or the API sees a byte of it, and the refusal is logged.
//   - With peer TLS, every connection is mutual TLS (package security)
//     before its hello.
//   - The identity file is replaced atomically and synced with its
//     directory: a crash leaves the old file or the new one.
//
// Not guaranteed: without peer TLS the peer port is plaintext and whoever
// reaches it can act as a member. The package knows nothing of leases or
// of raft beyond being its StreamLayer.
package peers
