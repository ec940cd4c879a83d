// Package logs carries a fenced node's records to its log: hashicorp/raft's
// hclog records into the node's slog handler, and the Writer that lets the
// node write the transition records of one applied batch in one write.
//
// Guarantees: every raft record at or above the minimum level reaches the
// handler as a record of its own; a Writer keeps records in the order they
// were written and writes them out by the end of the batch (or once it
// holds 64 KiB), and outside a batch writes each at once.
//
// Not guaranteed: a process killed during a batch loses that batch's
// records (not its transitions, which are in raft's log); a failed write
// is dropped, as the slog handler above would drop it.
package logs
