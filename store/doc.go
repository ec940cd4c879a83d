// Package store is the reference fenced store: a small durable object store
// that refuses writes carrying a stale fencing token. It is the "custom
// service" that `fenced store` serves, and the target of the demo and the
// torture tests.
//
// Objects, the highest accepted token per scope, and an append-only audit of
// every accepted write live in one bbolt file, opened as a fencebolt guard:
// the store is built the way a service of its own should use package fence.
// Each write goes through fencebolt.Guard.DoTx, one read-write transaction that checks
// the highest token, writes the object and appends the audit record (the
// store's part), and raises the highest token; the transaction is fsynced
// before the writer gets its answer. Scopes and object names follow the rule
// of lease keys, fence.ValidateScope.
//
// The file's layout has a schema version. Version 1 (stores before the
// guard was used) kept highest tokens in a bucket of its own; Open moves
// them to the guard's bucket, in one transaction, and writes version 2. Older
// stores refuse a version 2 file with "unsupported schema version", as
// Open refuses versions it does not know.
//
// HTTP contract (pinned: clients and tests outside this repository rely on it):
//
//	PUT    /v1/objects/{name}  body = value        -> 204 No Content
//	DELETE /v1/objects/{name}                      -> 204 No Content, 404 if absent
//	GET    /v1/objects/{name}                      -> 200 value, 404 if absent
//	GET    /v1/audit?after=SEQ&limit=N             -> 200 {"records": [...], "next": SEQ}
//	GET    /v1/rejections                          -> 200 recent stale rejections (JSON)
//	GET    /rejections                             -> 200 the same as an HTML page
//	GET    /healthz                                -> 200 "ok"
//	GET    /metrics                                -> Prometheus exposition
//
// PUT and DELETE need the headers Fencing-Scope (the lease key) and
// Fencing-Token (a uint64 above 0 in canonical decimal: "007" and "+7" are
// malformed, not 7), and may carry Fencing-Sequence (docs/guard-spec.md,
// section 7). A write whose sequence is at or below the last one accepted
// under its token is a duplicate, answered 409 with the problem type
// urn:fenced:problem:duplicate-write, not applied, not audited, and not
// counted as a stale rejection. With Config.StrictSequences a sequence other
// than the last plus 1 under the current token is a gap, answered 409 with
// urn:fenced:problem:sequence-gap, and not applied either. The audit record
// of every write carries its sequence (0: none). The headers are parsed and
// rejected by package fence/fencehttp, so the store answers exactly like the
// fencehttp middleware. An absent or empty Fencing-Token gives 428
// Precondition Required; a malformed token, or a missing or malformed scope,
// gives 400 Bad Request; a token below the highest accepted for the scope
// gives 409 Conflict with an RFC 9457 application/problem+json body carrying scope,
// presentedToken and highestToken. A body above the configured limit gives
// 413, an invalid object name 400. Nothing is applied or recorded in any of
// these cases. The fencing check comes before the existence check, so a
// stale DELETE of an absent object is 409, not 404. A DELETE of an absent object
// with an acceptable token answers 404 and records nothing, not even the
// token: only writes that change data raise the highest token. Successful
// writes and reads carry an Audit-Seq header with the sequence number of the
// audit record of the write; reads also carry the Fencing-Scope and
// Fencing-Token of that write.
//
// Guarantees:
//   - A write is acknowledged only after its transaction is on disk: an
//     acknowledged write survives kill -9 and power loss (as far as fsync
//     does), and a write is either wholly applied (object, highest token,
//     audit record) or not at all.
//   - For each scope, accepted tokens never decrease in audit order, unless
//     the store runs with NoFencing.
//   - The audit is append-only and ordered by commit; sequence numbers start
//     at 1, increase by one and are never reused.
//   - Scopes are independent, and a scope is not tied to an object name: the
//     store fences whatever scope the writer names.
//   - A highest token that cannot be read (a damaged file) refuses every
//     write of its scope with a 500; it is never taken for 0, which would
//     turn fencing off for the scope.
//
// Non-guarantees:
//   - The store does not talk to the lease service. Without Config.Verifier
//     it trusts the token order: a writer that presents a token it never
//     held is accepted if the token is high enough. Any writer that can reach
//     the store can present 2^64-1 and block its scope for good: every later
//     token is stale, and the store has no way to lower a highest token.
//     Config.Authorize (fenced store --auth-file) narrows this to the
//     principals allowed to acquire the scope; Config.Verifier (fenced store
//     --trusted-keys-file) refuses, with 403 and before anything is read or
//     written, every token fenced did not sign for its scope, 2^64-1
//     included.
//   - A write whose answer was lost (connection cut, timeout) may or may not
//     have been applied; read the object or the audit to find out.
//   - The recent rejections list, the rejection count in logs and the
//     Prometheus counters live in memory and start over when the process
//     restarts. Rejections are never written to the database.
//   - With NoFencing the store accepts stale tokens (it still requires and
//     validates both headers, and still audits every write). It exists only
//     as a negative control for demos and torture tests.
//   - Writes are serialized by bbolt's single writer; throughput is bounded
//     by fsync latency.
package store
