// Package fences3 enforces fencing tokens on objects in S3 and S3-compatible
// object stores.
//
// Object stores have no locks and no transactions, but they have
// conditional writes: a PutObject with If-Match: <etag> is stored only if
// the object still has that ETag, and one with If-None-Match: * only if
// there is no object. A guarded object carries its fencing state in its
// own user metadata (MetaScope, MetaToken, MetaSequence, MetaDeleted: the
// headers x-amz-meta-fencing-scope, x-amz-meta-fencing-token,
// x-amz-meta-fencing-sequence, x-amz-meta-fencing-deleted). A write reads
// the object's metadata and ETag (HEAD), decides (invariant I5, and the
// sequence rule), and stores the new data with the new token by a PUT
// conditional on the ETag it read, so the check and the write are one
// atomic step in the server. A PUT refused with 412 lost the race to
// another writer: the guard reads again and decides again, up to
// Config.Attempts times.
//
//	g, _ := fences3.New(client, "orders", fences3.Config{})
//	err := g.PutLease(ctx, lease, "orders/7.json", data, nil)
//	if errors.Is(err, fence.ErrStaleToken) { ... authority lost ... }
//
// An S3 ETag is a digest of the body, not a version: two writes of the same
// bytes have the same ETag whatever their metadata. So that a
// compare-and-set on the ETag sees every write, the guard stores each body
// as a line "fenced-s3 <write ID>\n" unique to the write, then the data.
// Read guarded objects with Get (or strip the first line): other S3
// readers see the line.
//
// # Many objects: the commit pointer
//
// Each object is fenced on its own; S3 has no write that spans objects. A
// scope whose state is many objects (the files of a job's output, a table's
// data files) is made consistent with a commit pointer: write the data to
// new, unique keys (DataKey, PutData: If-None-Match: *, never overwritten),
// then write one small object that names them, the pointer or manifest,
// through Put, last. Readers read the pointer (Get) and then the objects it
// names. The pointer write is fenced: a stale writer's data objects may
// exist, but no pointer ever names them. Data objects whose token is below
// the pointer's and that the pointer does not name can never be committed
// and may be deleted.
//
// The exact layout is the guard spec's section "Object storage (S3)", so
// that guards in other languages share the objects.
//
// # Guarantees
//
//   - A Put, Update or Delete with token t for an object is stored only if
//     no write with a higher token was stored for that object (invariant
//     I5), and the token is stored in the object's metadata with the data,
//     so it is exactly as durable as the object.
//   - With a sequence (fence.WithSequence), the sequence rule of the guard
//     spec holds: a duplicate is refused with fence.ErrDuplicate and not
//     stored again; strict sequences refuse a gap.
//   - Stale writes are refused with a *fence.StaleTokenError and told to
//     the Observer; the lease-taking calls (PutLease, UpdateLease,
//     DeleteLease) call the lease's MarkLost.
//   - A PUT that got no answer, or a 5xx one, returns an error matching
//     fence.ErrUnknownOutcome; re-sent with the same sequence (fence.Retry)
//     it is stored at most once. The SDK's own retries are off for the
//     conditional PUT for this reason.
//   - Delete keeps the token: a tombstone, so a stale writer coming later is
//     still refused.
//
// # Non-guarantees
//
//   - Several objects are never written atomically: a scope guarded across
//     independent objects can be left with some written and others not,
//     and a reader can see a mix. Use the commit pointer.
//   - Writes that bypass the guard (a plain PutObject, CopyObject, a
//     multipart upload) are not fenced. The guard refuses to write over an
//     object without valid fencing metadata (ErrCorruptObject) rather than
//     guess.
//   - Removing an object (DeleteObject, a lifecycle rule, a bucket policy
//     that expires objects) forgets its token: a stale writer can then
//     create it again. The guard never removes objects. A conditional
//     DeleteObject (If-Match) would not help either: servers do not all
//     check it under the lock that serializes PUTs (versitygw 1.8 does
//     not), and a removed object has no token left to refuse the next
//     writer with.
//   - Update may call its function more than once (a lost race calls it
//     again on the new data); effects outside the object are neither
//     atomic with the token nor serialized.
//   - Tokens of different scopes are not compared: an object fenced under
//     one scope refuses every other (ErrScopeMismatch).
//   - The server must enforce If-Match and If-None-Match on PutObject
//     atomically with the write. AWS S3 does; so does versitygw (the tests
//     run against it). A server that ignores the headers, or a proxy that
//     drops them, gives no fencing.
//   - Bodies are read and written whole, in memory: the guard is for
//     objects of modest size, such as records, manifests and pointers.
//     Large data goes to data objects behind a pointer, each written once
//     (PutData).
//   - Under heavy contention on one object a write may give up
//     (ErrContention) after Config.Attempts rounds; nothing is stored.
package fences3
