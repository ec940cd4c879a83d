// Package fencenats enforces fencing tokens on data kept in NATS JetStream:
// a key-value bucket (KV) and the subjects of a stream (Stream).
//
// JetStream has no locks and no transactions, but it has compare-and-set:
// a KV update names the revision it replaces, and a publish can name the
// stream sequence of the last message on its subject
// (Nats-Expected-Last-Subject-Sequence). Both guards read the highest
// token where the data is, decide, and write conditionally on what they
// read, so the check and the write are one atomic step in the server. A
// write that lost the race to another reads again and decides again.
//
// KV keeps one entry per scope: its value is "<token>:<sequence>\n" and
// then the data the token protects, and its key is Key(scope) (after
// Config.KeyPrefix). Put, Update (read-modify-write) and Do (fence.Guard,
// for fencemsg) store new data only if the token is at least the entry's.
//
//	g, _ := fencenats.NewKV(kv, fencenats.Config{})
//	err := g.Put(ctx, lease.Key(), lease.Token(), []byte("shipped"))
//	if errors.Is(err, fence.ErrStaleToken) { ... authority lost ... }
//
// Stream treats each subject as a log of one scope: every message carries
// the fencing headers of package fencemsg, and a publish is stored only if
// its token is at least that of the subject's last message. Consumers of
// the stream then read, per subject, messages whose tokens never go back.
//
// The exact layout is the guard spec's section "NATS JetStream", so that
// guards in other languages share the entries and subjects.
//
// # Guarantees
//
//   - A KV write or a publish with token t for scope S is stored only if no
//     write with a higher token was stored for S's entry or subject
//     (invariant I5); the token is stored with the data, in the same entry
//     or message, so it is exactly as durable as the data.
//   - With a sequence (fence.WithSequence), the sequence rule of the guard
//     spec holds: a duplicate is refused with fence.ErrDuplicate and not
//     stored again; strict sequences refuse a gap.
//   - Stale writes are refused with a *fence.StaleTokenError and told to
//     the Observer; the lease-taking calls (KV.DoLease,
//     Stream.PublishLease) call the lease's MarkLost.
//   - A write whose request got no answer returns an error matching
//     fence.ErrUnknownOutcome; re-sent with the same sequence
//     (fence.Retry) it is stored at most once.
//
// # Non-guarantees
//
//   - Writes that bypass the guard (a plain KV Put, a plain publish) are not
//     fenced. The guards refuse to write over an entry or after a message
//     without a valid token (ErrCorruptEntry) rather than guess.
//   - KV.Do and Update may run their function more than once; effects
//     outside the entry are neither atomic with the token nor serialized.
//     There is no multi-key transaction: one scope, one entry.
//   - Deleting or purging a scope's entry, or every message of a subject
//     (a purge, or the stream's limits: MaxAge, MaxMsgs, MaxBytes, a work
//     queue or interest retention), forgets its highest token. Keep the last
//     message of each subject (limits retention with MaxMsgsPerSubject, no
//     limit that can empty a subject) and the entry (a bucket without TTL)
//     for the fence to hold.
//   - Tokens of different scopes are not compared: a subject written under
//     one scope refuses every other (ErrScopeMismatch).
//   - On a stream, a publish without a sequence ends its epoch's sequence
//     numbering (the last message carries none), unlike the SQL and Redis
//     guards, which keep the last sequence.
//   - Under heavy contention on one scope a write may give up
//     (ErrContention) after Config.Attempts rounds; nothing is stored.
package fencenats
