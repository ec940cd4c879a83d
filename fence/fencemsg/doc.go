// Package fencemsg fences queued messages at the consumer.
//
// A queue keeps a message long after its producer stopped: a producer
// paused past its lease's TTL may have messages waiting in RabbitMQ or
// NATS while a new holder of the lease publishes its own, and redelivery
// (a consumer that died before its ack, an ack deadline that passed) puts
// old messages behind new ones. The lease cannot stop them; the consumer,
// where the message's effect lands, can.
//
// A producer stamps each message with its lease (LeaseStamp, Stamp.Write):
// the scope and token, and a sequence when the lease is numbered
// (fence.Sequenced) or the context carries one (fence.WithSequence,
// fence.Retry). A Consumer decides each message with a guard from package
// fence or its subpackages, which keeps the highest token of each scope:
// Consumer.Apply runs the consumer's side effect only if the message's
// token is at least the highest accepted for its scope (invariant I5), in
// the guard's transaction, so that the effect and the new highest token
// commit together. The header layout is the guard spec's "Messages"
// section; the adapters for amqp091-go (fenceamqp) and nats.go JetStream
// (fencejetstream) carry it and settle deliveries by Outcome, so this
// package depends on no broker.
//
//	g, _ := fencesql.New(db, fencesql.Config{Dialect: fencesql.Postgres, Observer: reporter})
//	c, _ := fencemsg.New(fencemsg.Config{Guard: g.TxGuard()})
//	o, err := fenceamqp.Handle(ctx, c, delivery, func(ctx context.Context) error {
//		tx, _ := fencesql.TxFromContext(ctx)
//		_, err := tx.ExecContext(ctx, `UPDATE orders SET status = $1 WHERE id = 7`, status)
//		return err
//	})
//
// # Guarantees
//
//   - A message is applied only if no message (or other write through the
//     same guard) with a higher token has been accepted for its scope; its
//     effect and the new highest token commit together when the guard
//     commits apply's effect with the token (fencesql's TxGuard; fencenats's
//     KV guard for an entry; fence.NewMemory for memory; fencebolt's DoTx
//     called directly, with Classify).
//   - A stale message is refused with a *fence.StaleTokenError, nothing of
//     it is applied, and the guard's Observer is told (fence/fencereport
//     reports it to fenced). It is acked: no redelivery can make it current.
//   - With a sequence, a message applied once is never applied again: a
//     redelivered or re-sent copy is a Duplicate (acked, not applied).
//   - Scopes are independent (invariant I6): a token for one scope never
//     fences another.
//   - A message that could not be decided or applied (the guard's store is
//     down, apply failed) is left for redelivery, with nothing recorded.
//
// # Non-guarantees
//
//   - The producer is not told when its messages are refused: a queue has
//     no answer path. It learns that its authority is lost from its lease
//     (Done), and should check it before each publish; fenced shows the
//     rejections reported to it with both epochs' owners.
//   - Messages of the stale holder that reach the consumer before any
//     message of the new holder are applied: they were current when they
//     were applied. Fencing orders epochs at the resource; it does not
//     retract what a holder published before it lost the lease.
//   - A message without a sequence may be applied twice, when the consumer
//     dies after the commit and before the ack (at-least-once delivery).
//   - Sequences assume one epoch's messages reach the consumer in order. A
//     broker that redelivers a message after later ones of the same token
//     (several in flight, a consumer that died holding some) makes the
//     guard refuse the earlier one as a duplicate, and it is lost. Use a
//     guard with strict sequences (StrictSequences: a message that skips
//     ahead is redelivered until the one before it is applied), or deliver
//     one message of a scope at a time (RabbitMQ: prefetch 1 per consumer
//     of a single-active-consumer queue; JetStream: MaxAckPending 1). With
//     strict sequences a producer must never skip a sequence (re-send a
//     failed publish with the same stamp), or its scope stalls.
//   - Effects that apply makes outside the guard's transaction are not
//     atomic with the token (see the guard's own package).
//   - The broker's own guarantees are not changed: a message the broker
//     loses is lost, a refused one is gone from the queue.
package fencemsg
