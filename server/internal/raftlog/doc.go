// Package raftlog is a fenced node's raft log and stable store on disk:
// hashicorp/raft-wal in a locked data directory, with the repairs fenced
// needs around it.
//
// The data directory (see docs/data-directory.md):
//
//	LOCK                 flock held while a fenced process uses the directory
//	wal/                 the raft log and stable store (hashicorp/raft-wal)
//	snapshots/           raft file snapshots of the lease state
//	raft.db.migrated     the bbolt log of an earlier version, once migrated
//
// Guarantees:
//   - Only one process opens a data directory at a time, where flock exists
//     (ErrDataDirInUse).
//   - Open refuses a log damaged anywhere before its last append, and one
//     that ends before the index recorded at the last clean shutdown
//     (ErrCorruptLog): entries there may have been acknowledged. Damage
//     confined to the last append, which a crash can tear, is dropped.
//   - A bbolt log of an earlier version is migrated whole or not at all.
//   - After one failed write or fsync, FailStop refuses every later write
//     (ErrLogWrite): the file's state after a failed fsync is unknown.
//   - Compacted and Monotonic keep raft from replaying compacted entries
//     to a follower, from deleting the log that follows a snapshot it
//     just installed, and from refusing every append after one that
//     conflicts with its log (hashicorp/raft#697).
//   - Timed reports the duration of every append, failed ones too.
//
// Not guaranteed: raft-wal cannot tell a torn last append from one damaged
// after it was acknowledged, so such damage costs that append. Nothing here
// knows about leases; the package imports nothing of fenced but the
// failpoint wrappers.
package raftlog
