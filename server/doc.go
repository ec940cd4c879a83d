// Package server is a fenced node: the lease state machine (package lease)
// replicated by hashicorp/raft, the leader's expiry and wait queues, and the
// lease API over Connect (gRPC, gRPC-Web and JSON over HTTP).
//
// A node is one raft member; a cluster of one is the default. Grants,
// releases, revocations and expiries are log entries, applied in log order
// on every node, and a grant's fencing token is the index of its entry.
// Deadlines are not in the log: the leader keeps them on its monotonic
// clock, renews by moving them, and writes an expiry to the log when one
// passes. Every node serves every call: the leader serves writes and
// linearizable reads itself, any other node forwards them to it over the
// peer port and hands back its answer as it came.
//
// Guarantees:
//   - A grant, release or revocation is acknowledged only once its entry is
//     on disk (fsynced) on a quorum of nodes and applied by the leader:
//     whatever was acknowledged survives a crash of any minority, and of
//     every node.
//   - A renewal is acknowledged only after this node confirmed, by a quorum
//     contact that began after the renewal arrived, that it still leads
//     (internal/leadercheck, internal/contact, contact.go); the new deadline counts from before that
//     contact, so it never outlives what the confirmed leadership covers.
//     Renewals that arrived before one contact began may share it (the
//     KeepAlive stream batches those it read ahead); a sole voter's own
//     state, read after the renewal arrived, is its quorum.
//   - An expiry carries the term of the leadership that decided it, and the
//     state machine applies it only in an entry of that term: a deposed
//     leader's late decision ends nothing.
//   - A new leader first applies every entry of earlier terms, then gives
//     every lease a full TTL from that moment before it may expire any:
//     failover never shortens a lease.
//   - Get and List are linearizable: answered by the leader after a
//     leadership confirmation that began after the read arrived.
//   - Watch is served by every node from the transitions it applied, which
//     are the same on every node, in log order, with the log index as
//     revision; a watcher that falls behind, or leaves more than
//     StreamUnackedBytes unread on its connection, is told so (RESYNC). A node
//     starts Watch streams and dashboard snapshots only once it has applied
//     the log it held at start (catchup.go): a restarted node never shows
//     the leases of that log as gone.
//   - A release, revocation or expiry of a key with waiters hands the key to
//     the first of them in the same log entry, with a token of its own.
//   - Every blocking call honours its context. When a context ends while a
//     write is in the log's hands, the answer says so (deadline_exceeded,
//     or unavailable when the node is closing): the write may or may not
//     take effect, and is never reported as not applied.
//   - A member that lost its data directory never votes, nor counts toward
//     an election's quorum, until it has been removed and added back as a
//     new member: started again on an empty directory with its initial
//     cluster it refuses once a peer answers (and waits while none does);
//     with --join or --initial-cluster-state existing it copies the log but
//     refuses every vote. Peers of another cluster (different cluster IDs)
//     are refused on every peer connection (internal/peers/identity.go).
//   - Bad input is refused with invalid_argument and changes nothing
//     (internal/api/validate.go); domain errors are mapped to Connect
//     codes in one place (apierr.Connect).
//
// Non-guarantees:
//   - A lease may outlive its holder's last renewal by more than its TTL:
//     across a failover, by the election time plus a full TTL.
//   - Remaining TTLs in answers are the answering node's estimate; clients
//     should count from when they sent the request, not read the server's
//     clock (a client never needs it).
//   - On failover a client may see unavailable while no leader is known (a
//     node waits up to 2 heartbeat timeouts for one), uncertain outcomes for
//     writes in flight (an acquisition that may have been granted under an
//     ID it never learned: the key then stays held until that lease
//     expires), and failed renewals although its lease lives on at the new
//     leader. Waiting acquisitions move to the new leader with what is left
//     of their wait, but lose their place in line.
//   - A Get or List sent with "Fenced-Stale-Read: true" is answered from the
//     receiving node's own state without any check, and may miss recent
//     transitions.
//   - Stale rejections reported by resources live in the leader's memory
//     only, and REJECTED Watch events are not replayed: a node relays the
//     leader's to its watchers (internal/rejections), so a watcher may
//     miss those recorded from a leader change until its node reconnects.
//   - Wait queues and deadlines live in the leader's memory only; counts of
//     transitions (/v1/stats, /metrics) start at zero with each process.
//   - Per-owner quotas count what owners say they are unless auth is on,
//     and grants in flight are not counted.
//   - MaxLeases and MaxLeaseBytes are checked by the leader on the state
//     it has applied: grants in flight are not counted, and a key handed
//     to a waiter is not refused (MaxLeaseBytes may be passed by the
//     difference of the owners' lengths). MaxLeaseBytes counts
//     lease.Cost, the live heap a lease was measured to take; resident
//     memory runs up to about twice the live heap (the Go collector's
//     headroom), and the node's bounded structures (the raft log cache,
//     the watch history) come on top.
//   - A node started without an initial cluster has no peers to ask: on an
//     empty data directory it forms a new cluster of one even if members
//     were added to it; data directories from fenced restore or earlier
//     versions carry no cluster ID (internal/peers/identity.go).
//
// Layout: the node is this package: server.go (start-up, raft wiring,
// leadership, Close), apply.go (the write path and what every node keeps
// beside the state machine), leases.go (the lease operations in domain
// terms: the Go API), config.go (Config and its defaults), and the glue
// that hands each package below what it needs of the node (api.go,
// auth.go, cluster.go, clienturls.go, dashboard.go, forward.go,
// rejections.go, httpserver.go: the HTTP server and its routes).
//
// Beneath it, in packages that import nothing of it (imports_test.go pins
// the graph, lowest first):
//   - internal/raftlog: the raft log and stable store on disk, and their
//     repairs; internal/fsm: raft's state machine over lease.State;
//     internal/contact: raft's transport, noting each peer's last answer;
//     internal/leadercheck: coalesced leadership confirmations;
//     internal/expiry: the leader's deadlines; internal/waiters: the lines
//     of waiting acquisitions and handovers; internal/security:
//     TLS, the auth policy, authentication and authorization, signing keys;
//     internal/sharegate, internal/streamwrite, internal/logs: slots that
//     keep reads and fan-out from starving writes, a stream's write
//     control and its bound on the bytes its client has not read, raft's
//     records into slog; internal/fanout: transitions to
//     watchers and dashboards.
//   - internal/peers: the peer port and a member's identity;
//     internal/admission: the per-client shares of the HTTP front;
//     internal/rejections: stale rejections reported by resources, and
//     their relay; internal/dashboard: the dashboard's page and streams;
//     internal/restore: a new member's data directory from a backup.
//   - internal/apierr: the domain errors and their one mapping to Connect
//     codes, the errors of the packages beneath it included.
//   - internal/api: the lease API's Connect handlers, input rules and a
//     lease's wire form; internal/membership: forming and joining a
//     cluster, ClusterService, members' client URLs; internal/nodemetrics:
//     the node's Prometheus collectors; internal/forward: reaching the
//     leader for the calls a node forwards.
package server
