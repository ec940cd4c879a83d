// Package fencebolt is the durable fencing guard: it keeps the highest
// token of every scope in a bbolt file (go.etcd.io/bbolt), fsynced before a
// mutation is acknowledged. It is a package of its own so that programs
// using package fence with another store (memory, SQL, Redis) do not link
// bbolt.
//
//	g, err := fencebolt.Open("/var/lib/app/fence.db", fencebolt.Config{})
//	err = g.Do(ctx, "orders/7", lease.Token(), func(ctx context.Context) error {
//		return writeTheFile(ctx)
//	})
//
// Guarantees:
//   - The rule of package fence (invariant I5): a mutation with token t for
//     scope S runs only if no mutation with a higher token was accepted for
//     S, and an accepted token is on disk before Do or DoTx returns.
//   - DoTx commits the mutation and the new highest token in one bbolt
//     transaction: both or neither.
//   - A crash never lowers a recorded token, and a damaged token is an error,
//     never read as 0.
//
// Non-guarantees:
//   - Do applies the mutation before it records the token, so a crash in
//     between leaves the mutation applied and the token unrecorded (see
//     Guard).
//   - One process at a time: bbolt locks the file.
//   - Durability is as good as the disk's fsync.
package fencebolt
