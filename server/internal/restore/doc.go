// Package restore makes the data directory of one member of a new cluster
// from a backup (the lease package's, as GET /v1/backup answers it): a raft
// snapshot at index max(A+Bump, StartFloor), A the backup's index, holding
// the backed-up keys and the new membership, in a term equal to that index.
//
// Guarantees: the new cluster starts at max(A+Bump, StartFloor), and
// every token it issues is above that index; every key of the backup
// remembers its last token, and no lease of the backup lives on. Every
// member restored from the same backup with the same Bump, StartFloor and
// InitialCluster starts from the same state at the same index; a member of
// several is refused without a StartFloor (ErrStartFloor). The raft state
// of a data directory that already holds some is never overwritten
// (ErrTarget).
//
// A restore starts a new cluster: its cluster ID derives from the backup's
// SHA-256 (kept in the identity as Backup), the start index and the
// membership, so every member of one restore shares it, while a member of
// the old cluster, or one restored from another backup or at another
// floor, has another and is refused on the peer port. Its first term is
// its first index, above any term the old cluster reached (one per
// election since its own start, itself a lower floor if it was restored).
//
// StartFloor is a time, in microseconds since 1970 (zero: now, for a
// cluster of one): a cluster restored later from the same backup starts
// above every token an earlier restore issued, as long as that one wrote
// fewer log entries than microseconds went by between the two restores
// (one entry per microsecond, a thousand times what a busy node writes)
// and the clocks of the machines that ran the restores agree to within
// that margin.
//
// Not guaranteed: Bump is the caller's to choose: tokens the old cluster
// issued more than Bump entries after the backup may be issued again (the
// floor covers them only under its own assumptions above). The node's rules
// for IDs and addresses of the membership, and the defaults of a restore,
// are the node's (server.RestoreConfig); Write checks neither.
package restore
