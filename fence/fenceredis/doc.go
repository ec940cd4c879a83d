// Package fenceredis enforces fencing tokens on data kept in Redis.
//
// A Guard applies a mutation for scope S only if the presented token is at
// least the highest token accepted for S, and then records it as the highest
// (invariant I5). Check, mutation and record are one Lua script, which Redis
// runs without interleaving any other command: no other client, fenced or
// not, can act between the check and the write.
//
//	g, err := fenceredis.New(client, fenceredis.Config{})
//	key := fenceredis.Key("orders/7", "order")   // "order{orders/7}"
//	err = g.Set(ctx, "orders/7", lease.Token(), key, "paid", 0)
//	if errors.Is(err, fence.ErrStaleToken) { ... authority lost ... }
//
// With a lease (a *client.Lease or any fence.Lease), WithLease binds the
// mutations to its key and token and calls its MarkLost on a stale rejection:
//
//	lg := g.WithLease(lease)
//	n, err := lg.Incr(ctx, lg.Key("invoices"))
//
// # Keys
//
// The highest token of scope S lives at Prefix + "{" + HashTag(S) +
// "}:highest" (by default "fence:{S}:highest"). Every key a mutation touches
// must carry the same hash tag, {HashTag(S)}, so that on Redis Cluster all of
// them hash to one slot and the script can run on one node; Key(S, name)
// builds such keys. A mutation whose keys carry another tag, or none, is
// refused with ErrKeyOutsideScope before anything is sent to Redis. The
// check is stricter than "same slot": a key of another scope that happens to
// share the slot is refused too, so a token for one scope never authorizes
// writes to another (invariant I6).
//
// Any non-empty scope is accepted. Redis ends a hash tag at the first '}',
// so HashTag percent-encodes '%', '{' and '}' (as %25, %7B, %7D); a scope
// without those characters is its own tag. The highest token is not stored
// under a key per scope name but per tag, which is one-to-one with the
// scope.
//
// # Mutations
//
// Set, Del, HSet, HDel, Incr, IncrBy and HIncrBy behave like the Redis
// commands of the same name; a command Redis refuses (a key of the wrong
// type, a value that is not an integer, an overflow) writes nothing and
// records no token. Eval
// runs a caller's Lua body after the check, in the same script; see Script
// for its KEYS, ARGV and TOKEN. Every mutation returns:
//
//   - nil (and its result) when the token was accepted and recorded;
//   - a *fence.StaleTokenError (errors.Is(err, fence.ErrStaleToken)) when the
//     token is below the highest; its Highest is the value the script read,
//     so it is exact, not a later re-read;
//   - fence.ErrNoToken for token 0 and fence.ErrInvalidScope for a scope
//     that fence.ValidateScope refuses, without contacting Redis;
//   - another error when Redis refused the script or could not be reached.
//
// Equal tokens are accepted: the holder of a lease writes many times with
// its token. Tokens are compared as decimal strings inside the script, so all
// 64 bits count (Lua numbers are doubles, exact only up to 2^53).
//
// # Lost replies
//
// go-redis re-sends a command when the connection breaks before the reply
// arrives (Options.MaxRetries, 3 by default), but Redis may have run the
// script already. Each call therefore carries a random 128-bit call ID,
// and the script stores its reply, under Prefix + "{" + HashTag(S) +
// "}:call:" + ID, for Config.ReplayWindow. A copy of the call finds that
// key and gets the first reply back without checking or applying anything,
// so a call reports exactly what happened to it: nil when its mutation was
// applied (once), a *fence.StaleTokenError when it was not. Client retries
// stay on; the alternative, retries off, would turn every lost reply into
// an error of unknown outcome.
//
// The memory is bounded in time. Every call gives up after half the window
// (its context ends; go-redis sends no copy after that), so copies reach
// Redis while the outcome is remembered, unless the network holds a copy
// back for longer than the other half. An error reply is not remembered
// (nothing was decided); a copy of that call runs again. Each call's
// outcome key costs about 100 bytes plus the call's result for the whole
// window.
//
// # Sequences
//
// A mutation whose context carries a sequence (fence.WithSequence) runs a
// second form of the script that also keeps the scope's last sequence, in
// Guard.SequenceKey ("<token>:<sequence>", in the scope's slot). A sequence
// at or below the last one under the same token is a duplicate: nothing
// runs, and the call returns a *fence.DuplicateError (fence.ErrDuplicate),
// not a stale token. With Config.StrictSequences a sequence other than last+1
// is refused with fence.ErrSequenceGap. Mutations without a sequence run
// the script they always did (same text and SHA-1) and leave the sequence
// key alone; when they raise the token, the key's older token makes its
// sequence count for nothing. With TokenTTL the sequence key expires with
// the token key, but only sequenced mutations refresh it. An error that
// leaves the outcome unknown (no reply) matches fence.ErrUnknownOutcome,
// so fence.Retry can send the mutation again with its sequence after the
// replay window has passed as well.
//
// # Guarantees
//
//   - Check, mutation and token record are atomic with respect to every other
//     Redis command, including writes that do not go through a Guard.
//   - A call applies its mutation at most once, and reports it applied
//     exactly when it was, even when go-redis re-sends it after losing the
//     reply (within Config.ReplayWindow; see Lost replies).
//   - A mutation with token t for scope S is applied only if no mutation with
//     a token above t has been accepted for S, as far as the token key
//     remembers (see below).
//   - The token is recorded only if the mutation succeeded. A mutation that
//     fails in Redis (a key of the wrong type, for instance) leaves both
//     the data and the highest token unchanged; for the built-in mutations
//     this is complete, see Script for caller-supplied bodies.
//   - Data and token are written by one script, so they reach the AOF, the
//     RDB snapshot and replicas together (Redis replicates a script's effects
//     as one MULTI/EXEC): after any crash or restart, the token is exactly as
//     durable as the data it protects, whatever the persistence settings.
//   - A client that dies mid-operation leaves either the whole script applied
//     or nothing: Redis runs a script only once its command has fully
//     arrived.
//
// # Non-guarantees
//
//   - Durability is Redis's. With appendfsync everysec (the default) or RDB
//     only, an acknowledged mutation can be lost in a crash of Redis, token
//     and data together. With appendfsync always, it is on disk before the
//     reply. Neither loses the token while keeping its data.
//   - Replication is asynchronous. After a failover to a replica that had
//     not received the last writes, those writes and their tokens are gone
//     together, and a token below a lost one (but not below the highest that
//     survived) is accepted again. WAIT or WAITAOF after a mutation narrow
//     this window; the Guard does not call them.
//   - Eviction: under an allkeys-* maxmemory-policy, Redis may evict a
//     highest-token key while the data stays, and the guard then accepts
//     stale tokens. Run guarded data on a Redis with noeviction or a
//     volatile-* policy (the token key has no expiry by default, so volatile
//     policies never pick it).
//   - Expiry: with Config.TokenTTL set, an idle scope forgets its highest
//     token, and stale tokens are accepted again. That is why it is off by
//     default: the token must live at least as long as the data it guards.
//   - A Guard protects only mutations routed through it. Plain commands on
//     the same keys are not fenced (they are still serialized with the
//     guarded ones).
//   - A call that fails with a network error or a timeout has an unknown
//     outcome: the script may have run (at most once, see Lost replies).
//     Retrying with the same token is safe for idempotent mutations such as
//     Set and Del.
//   - Exactly-once holds only within Config.ReplayWindow (default one
//     minute), see Lost replies; after a failover to a replica that had not
//     received an outcome key, a late copy of the call runs again.
//   - Deleting a scope's data does not delete its highest-token key, and
//     nothing here does: forgetting it would let stale tokens in again. Keys
//     accumulate one per scope ever written.
//   - With a *redis.Ring, a scope's keys follow its hash tag to one shard,
//     so a script stays on one server. Adding or removing a shard moves
//     scopes to shards that do not hold their highest token: stale tokens
//     are accepted there until a newer one arrives. Redis Cluster moves a
//     slot with its keys, so resharding does not have this problem.
//   - Scripts that run long block the whole Redis server, as any Lua script
//     does; keep caller-supplied bodies short.
//
// Guard does not implement fence.Guard, whose Do runs an arbitrary Go
// function that a Redis script cannot contain.
package fenceredis
