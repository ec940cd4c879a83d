// RabbitMQ (AMQP 0-9-1) through amqplib for the message fence (guard spec,
// section 8; the Go package fence/fencemsg/fenceamqp does the same).
//
// The producer publishes with publishOptions(stamp): the fencing headers as
// long strings in the message's headers table. The consumer decides each
// delivery with handle(consumer, channel, msg, effect), which settles it
// after the guard's decision is final (after the commit): applied, stale
// and duplicate are acked, refused is rejected without requeue (dead-
// lettered if the queue has a dead-letter exchange), redeliver is nacked
// with requeue. A fencing header of another type than a long string or a
// byte array (a number, a table) is refused, never converted.
//
// A consumer that stops between the commit and the ack leaves the message
// to be delivered again; with a sequence that copy is a duplicate, acked
// without being applied again. RabbitMQ has no delayed requeue: a message
// that keeps failing (a strict guard's gap waiting for a message another
// consumer holds, a database that is down) comes back as fast as it is
// taken. Keep a scope's messages in order (a single active consumer,
// prefetch 1) or bound redeliveries (a quorum queue's x-delivery-limit with
// a dead-letter exchange).

import type { Channel, Message, Options } from "amqplib";
import { type MessageConsumer, type MessageResult, type Outcome, type Stamp, writeStamp } from "./messages.js";

/**
 * Options for channel.publish carrying the stamp: a copy of options whose
 * headers are options.headers with the fencing headers set (or removed, for
 * the optional ones the stamp has not). Publish a re-sent message with the
 * same stamp. Throws, writing nothing, for an invalid stamp.
 */
export function publishOptions(stamp: Stamp, options: Options.Publish = {}): Options.Publish {
  const headers = writeStamp(stamp, { ...(options.headers as Record<string, unknown> | undefined) });
  return { ...options, headers };
}

/** The part of an amqplib Channel that settles deliveries. */
export type Settler = Pick<Channel, "ack" | "nack" | "reject">;

/**
 * Settles msg by outcome: ack (applied, stale, duplicate), reject without
 * requeue (refused), or nack with requeue (redeliver).
 */
export function settle(channel: Settler, msg: Message, outcome: Outcome): void {
  switch (outcome) {
    case "applied":
    case "stale":
    case "duplicate":
      channel.ack(msg);
      return;
    case "refused":
      channel.reject(msg, false);
      return;
    default:
      channel.nack(msg, false, true);
  }
}

/** A decision and, when the channel could not settle the delivery, why. */
export type Handled<T> = MessageResult<T> & { settleError?: unknown };

/**
 * Decides msg with consumer (its headers, as amqplib decoded them) and
 * settles it on channel, which must consume without noAck. Never throws:
 * an error settling msg is settleError, and RabbitMQ delivers msg again
 * when the channel closes, for the guard to decide again.
 */
export async function handle<C, T>(
  consumer: MessageConsumer<C>,
  channel: Settler,
  msg: Message,
  effect: (ctx: C, stamp: Stamp) => Promise<T>,
): Promise<Handled<T>> {
  const r: Handled<T> = await consumer.apply(msg.properties.headers, effect);
  try {
    settle(channel, msg, r.outcome);
  } catch (err) {
    r.settleError = err;
  }
  return r;
}
