// Package election elects one leader among candidates through a fenced
// lease, in the vocabulary of etcd's concurrency.Election and client-go's
// leader election.
//
// An election is a lease key: its name. [Elections.Campaign] waits in line
// for the key and returns a [*Leadership] that carries the lease: the fencing token to
// present to every resource the leader writes to, and a context cancelled
// the moment leadership can no longer be counted on. The candidate's value
// (its address, say) is published as the lease's owner, so
// [Elections.Leader] and [Elections.Observe] read it from anywhere, along with
// the leader's token:
//
//	e := election.New(c)
//	l, err := e.Campaign(ctx, "controllers/orders", "10.0.0.7:8080")
//	...
//	defer l.Resign(context.Background())
//	work(l.Context(), l.Token())
//
// [Elections.Run] wraps Campaign in client-go's callbacks: OnStartedLeading
// with the leadership, OnStoppedLeading, OnNewLeader with each leader's
// value.
//
// # Safety
//
// Guarantees:
//   - At most one leadership of a name is current on the server at any
//     instant, and every leadership has a higher token than all before it
//     (invariants I1 and I3, defined in package
//     [github.com/fencedio/fenced/lease]): a guard that checks tokens refuses what a
//     former leader sends once the new one has written.
//   - A Leadership's context is cancelled when the lease is lost or
//     resigned, by the client's conservative local deadline (see package
//     [github.com/fencedio/fenced/client]): before the server can elect anyone else. Once lost, a
//     leadership never comes back; campaign again for a new token.
//   - The published value is the lease's owner and nothing else: the
//     lease ID, which renews and releases the lease, never leaves the
//     leader.
//   - Candidates are served first come, first served: the server keeps
//     waiting acquisitions in line.
//
// Non-guarantees:
//   - Leadership does not stop a paused leader from acting: between a check
//     of its context and a write, any amount of time can pass. Only a guard
//     that compares tokens where the write lands prevents two leaders'
//     writes from both landing (see docs/election.md).
//   - Observe reports each new leader once and in order, but not the time
//     in between: a leader that resigned or expired without a successor is
//     not reported (Leader answers ErrNoLeader then), and leaders that came
//     and went while the watch was being re-established are skipped.
//   - A Campaign cut short by its context may have been granted all the
//     same; that lease is then never seen and expires after its TTL.
//   - Values are not checked for uniqueness. Give every candidate its own
//     value: the client reports an acquisition cut by a failover as of
//     unknown outcome when the key is held by its own owner (see
//     [client.ErrAcquireUncertain]), and Campaign waits such a grant out.
//
// # Cost
//
// A leadership is one lease: its renewals share the client's renewal
// stream, and candidates wait in line on the server, not by polling.
// Each Observe holds one Watch stream.
package election
