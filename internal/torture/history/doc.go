// Package history is the record of a torture run: every lease call and
// write a worker made (Op), appended to a file as JSON lines at its start
// and with its result (Recorder), and the files of all workers merged into
// one history in real-time order (ReadHistory). It also defines the value
// a write stores (ObjectValue) and the record of a write that the
// delaying proxy held back (DelayedWrite), which the checkers hold
// against what the resources kept.
//
// # Guarantees
//
//   - Each record is one write(2), so a worker killed with SIGKILL loses
//     at most the record it was writing; ReadHistory tolerates that torn
//     last line, and any other malformed line is an error.
//   - For each operation the last record wins: an operation whose result
//     was never recorded stays in the history as invoked and unfinished
//     (Finished reports false), never as failed.
//
// # Non-guarantees
//
//   - Records are not fsynced: they survive the death of the worker, not
//     of the machine.
//   - Timestamps are the wall clock of the process that wrote them; they
//     order operations only when every worker runs on one machine.
//   - It judges nothing: package check does.
package history
