// Package failstore holds the failpoints that wrap storage: the raft log
// store, the raft log's file system and metadata, and the reference store's
// bbolt file (see package failpoint for the mutants and the build tag).
// It is apart from failpoint so that the lease state machine, which asks
// failpoint.Enabled, and everything that imports it link neither raft nor
// bbolt.
//
// Without the tag fenced_failpoints every function returns its argument.
package failstore
