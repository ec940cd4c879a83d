// Package torture is fenced's fault-injection harness: it runs real
// processes against a lease service and fenced resources, injects faults,
// records a history and checks it. `fencectl torture` and the package's
// tests drive the same engine (Run).
//
// # What a run does
//
//   - Workers are separate OS processes (`fencectl torture worker`), so
//     that they can be frozen for real. Each loops: acquire a random key
//     (usually waiting in line), make a few writes with its token, each a
//     PUT to the reference store, (with PostgreSQL) a fencesql-guarded
//     transaction and (with Redis) a fenceredis-guarded script, with random
//     think time, then release the lease or abandon it to expire. A stale
//     rejection ends the lease (Lost, I7). A share of the writes carry the
//     lease's next sequence; such a write whose outcome the worker does
//     not know (a timeout, a crash of the store, an answer it threw away
//     on purpose) is resent with the same token and sequence, and the
//     guard must apply it at most once.
//     Workers do not check their lease's local deadline before writing, so
//     every pause turns into a write that reaches the resource.
//   - The harness freezes (SIGSTOP) a worker that holds a lease for 1.5-3
//     TTL and resumes it (SIGCONT); a share of store writes goes through a
//     proxy that holds them past the lease's expiry before delivering them,
//     after the worker has given up and released the lease.
//   - The node (`fencectl torture node`, the same server as cmd/fenced) is
//     killed with SIGKILL at random moments, half of them within
//     microseconds after an acknowledged grant, release or renewal
//     (Config.AfterAckShare): timed from the node's own report of the
//     answer (failpoint.AckNotifyEnvVar) in a build with the failpoints,
//     else from the worker's record of it; a sixth a few milliseconds after
//     an acquisition starts or a key is freed, and started again on the same data directory and
//     ports. Optionally the store is crashed too.
//   - The node snapshots every 8 log entries (checked every 200ms) and,
//     before some kills, on SIGUSR1 from the harness, so that every run
//     takes snapshots, truncates the log and restores on restart.
//   - A quarter of the leases are held about 2×TTL, renewed several times.
//   - Config.LoseUnsynced makes every kill of a node or of the store a
//     simulated power loss (internal/failpoint, tagged build): raft log
//     writes not yet fsynced are held in the node's memory and die with
//     it, and bbolt files go back to their image at the last commit. A
//     missing fsync, invisible to kill -9, then loses data.
//   - Config.Failpoints switches on mutants (internal/failpoint) in a node
//     built with the fenced_failpoints tag; TestMutants requires that the
//     checkers catch each one.
//   - Config.Nodes 3 or 5 runs a cluster instead (cluster.go): node i on
//     127.0.0.(11+i), a link proxy (package netfault) in front of every raft peer
//     port, advertised as the node's raft address, which tells the peers
//     apart by the source address of their connections and drops,
//     black-holes or delays each directed link. Faults come one at a time
//     and heal: kills of the leader or a follower (half the leader kills
//     right after an acknowledgement), SIGSTOP of the leader past an
//     election but short of the TTL (half the time followed by freezing
//     every lease holder), the leadership handed to a follower and back
//     to the same node within about a TTL, isolation of the leader or a follower short of
//     the TTL, moving minority/majority splits, slow links, rolling
//     restarts, a member removed and added back empty, and (asked for by
//     name) disk loss: a member's data directory deleted while it is down,
//     started again with its usual command line when its vote decides,
//     and recovered as documented if it refuses. The election timeout is
//     TTL/4. Workers fail over between all nodes, and send half their
//     reads to a node picked at random.
//   - Config.QueueURL adds the queue path (queue.go, package queue):
//     before each round of writes a worker publishes to RabbitMQ a
//     message stamped with its lease (fencemsg: key, token, next
//     sequence), so that a holder woken from a pause publishes before a
//     stale rejection ends its lease; a share of leases publish through a
//     delay queue, whose messages arrive behind later holders'; an
//     unconfirmed publish is resent with the same stamp. A consumer
//     process applies each delivery through fencemsg and a fencesql guard
//     (its effect a row, in the guard's transaction) and settles it; the
//     harness kills it (SIGKILL), half the time between a decision to
//     apply and its ack, keeps it down 1.5-3 TTL and starts it again. The
//     queues are drained at the end, bounded in time.
//   - Every process that exits on its own (a panic in the client, the
//     server, the store or the consumer) is a violation, and is restarted.
//
// The harness is laid out by concern, its imports running one way
// (imports_test.go):
//
//   - history: the workers' records, merged into one history;
//   - check: the checkers, which judge a history and start nothing;
//   - worker: the Go worker process;
//   - queue: the queue path's broker clients: the workers' publisher, the
//     consumer process, and the harness's declaring and draining;
//   - netfault: the delaying store proxy and the cluster's link proxies;
//   - proc: the child processes (node, store, worker) and their control;
//   - this package, the engine, on top: engine.go runs the phases of a
//     run, processes.go starts and restarts the children, faults.go
//     injects the single-node faults, cluster.go and clusterfaults.go
//     form, break and check a cluster, evidence.go reads back the
//     resources and report.go sums up. Only cmd/fencectl imports it.
//
// # Checkers
//
// Package check holds the checkers and states what each one asserts;
// the summary lists them by name (store-no-stale-overwrite,
// lease-linearizable, lease-exclusion, ...). The engine adds four that
// watch the run itself rather than its history:
//
//   - processes-healthy: no worker, node, store or consumer process
//     crashed on its own.
//   - nodes-come-back: after every fault and at the end, every node runs,
//     is healthy and (clusters) names the same ready leader, whose
//     configuration has every node as a voter, within 30s.
//   - nodes-converge (clusters): once quiet at the end, every node has
//     applied the same raft index and holds the same leases, read from its
//     own state.
//   - wiped-member-refuses (clusters): no member that lost its data
//     directory became a voter again without being removed and added back.
//
// A negative control (Config.NoFencing) runs the same workload with the
// store's fencing off (store.Config.NoFencing) and SQL writes and queued
// messages unguarded; the
// stale-overwrite checkers must then fail, and the others must not.
//
// # Guarantees
//
//   - Checkers are sound with respect to the history: outcomes the harness
//     cannot know (a request cut by a crash, a timed-out write) are treated
//     as possibly applied, never as failed, so a violation is a real one.
//     The only timing assumption is that all processes read one machine's
//     clock; lease-exclusion allows 2ms plus 1000 ppm of the TTL between
//     the wall clock of the history and the clock the server expires by.
//   - Every child process is killed when Run returns, and by the kernel
//     (Pdeathsig, Linux) if the harness itself dies.
//
// # Non-guarantees
//
//   - A passing run proves nothing beyond the interleavings it produced;
//     the seed fixes the harness's random choices, not the scheduling.
//   - Acknowledged-write durability is only meaningful for the store when
//     it is crashed (Config.StoreCrashInterval); PostgreSQL is not crashed,
//     nor is the message broker: the queue path kills the broker's
//     clients, the consumer.
//   - Cluster faults need local nodes and loopback addresses other than
//     127.0.0.1 (Linux has them all); an external Endpoint is one node.
//   - A fault whose recovery takes longer than 30s is reported by
//     nodes-come-back, even if the node or cluster would have recovered
//     later.
//   - Simulated power losses cover the raft log (segments and metadata)
//     and the reference store, not raft snapshots or PostgreSQL; they do
//     not model torn or reordered writes or lost directory entries, and
//     they trust bbolt to fsync its commits.
//   - A linearizability check that times out reports "unknown", not a
//     violation, and the run is not clean (INCONCLUSIVE). An anomaly that
//     spans the cut between two windows of a key's history may be missed.
//   - Against an external store, the store must offer the reference
//     store's HTTP API, including GET /v1/audit.
package torture
