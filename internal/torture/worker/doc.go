// Package worker is the Go torture worker: the process that contends for
// leases and writes to the fenced resources with their tokens (Run), told
// what to do by a Spec, reporting Events on its standard output and every
// operation to its history file. docs/torture.md specifies the same
// protocol for workers in other languages.
//
// Every lease call is recorded at the wire, once per attempt, by an HTTP
// transport under the client library (leaserec.go), so that the history
// shows what the service was asked and answered, not what the library
// made of it.
//
// # Guarantees
//
//   - An outcome the worker cannot know (a timeout, a connection broken
//     after the request was sent, an acquisition that found its own owner
//     holding the key) is recorded as unknown, never as failed.
//   - A stale rejection ends the lease; a write is never retried under
//     another token.
//   - A write that carried a sequence and whose outcome is unknown (a
//     timeout, a broken connection, a 5xx, or an answer the worker threw
//     away on purpose, Spec.LostAnswerShare) is resent with the same token,
//     sequence, object and value, each copy recorded as an operation of its
//     own (history.Op.ResendOf). One without a sequence is not resent.
//   - With a queue (Spec.QueueURL), each round of writes starts with a
//     message published with the lease's stamp (fencemsg: key, token,
//     next sequence) and recorded as a KindPublish operation; one whose
//     confirmation was not read is resent with the same stamp and ID. All
//     of a lease's messages go to one queue (main or delay), in order.
//
// # Non-guarantees
//
//   - The worker does not check its lease before a write, on purpose: the
//     guards are what is tested, so a paused worker's write reaches the
//     resource.
//   - Its random choices follow Spec.Seed; the interleaving with other
//     processes does not.
package worker
