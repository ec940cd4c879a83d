// NATS JetStream through @nats-io/jetstream for the message fence (guard
// spec, section 8; the Go package fence/fencemsg/fencejetstream does the
// same).
//
// The producer stamps a message's headers (stampHeaders on a MsgHdrs made
// by headers() of @nats-io/transport-node) and publishes them with
// js.publish(subject, data, { headers }). The consumer decides each message
// with handle(consumer, msg, effect), which settles it after the guard's
// decision is final (after the commit): applied, stale and duplicate are
// acked (+ACK), refused is terminated (+TERM: never delivered again),
// redeliver is nacked (-NAK, optionally with a delay). The consumer must
// have an explicit ack policy.
//
// A consumer that stops between the commit and the ack leaves the message
// to be delivered again after its ack wait; with a sequence that copy is a
// duplicate, acked without being applied again. A header given more than
// once is invalid. NATS trims header values, so stampHeaders refuses a
// scope with leading or trailing white space, which would arrive as
// another scope.

import type { JsMsg } from "@nats-io/jetstream";
import { InvalidScopeError } from "../errors.js";
import { type HeaderWriter, type MessageConsumer, type MessageResult, type Outcome, type Stamp, writeStamp } from "./messages.js";

/**
 * Sets the stamp's headers in h (a MsgHdrs), replacing fencing headers
 * there and removing the optional ones the stamp has not; returns h.
 * Publish a re-sent message with the same stamp (with a Nats-Msg-Id,
 * JetStream drops the copy within its duplicate window; if not, the
 * consumer does). Throws, writing nothing, for an invalid stamp.
 */
export function stampHeaders<H extends HeaderWriter>(stamp: Stamp, h: H): H {
  if (typeof stamp.scope === "string" && stamp.scope.trim() !== stamp.scope) {
    throw new InvalidScopeError("invalid fencing scope: NATS trims header values, and this scope begins or ends with white space");
  }
  return writeStamp(stamp, h);
}

/** The part of a JsMsg that settles it. */
export type Settleable = Pick<JsMsg, "ack" | "nak" | "term">;

export interface SettleOptions {
  /** How long JetStream waits before it delivers a redeliver message again. Default: at once, or as the consumer's backoff says. */
  redeliverDelayMs?: number;
}

/**
 * Settles msg by outcome: ack (applied, stale, duplicate), term (refused),
 * or nak (redeliver), with options.redeliverDelayMs when set.
 */
export function settle(msg: Settleable, outcome: Outcome, options: SettleOptions = {}): void {
  switch (outcome) {
    case "applied":
    case "stale":
    case "duplicate":
      msg.ack();
      return;
    case "refused":
      // Without a reason: servers before 2.10 take "+TERM <reason>" for no
      // acknowledgement at all, and deliver the message again.
      msg.term();
      return;
    default:
      if (options.redeliverDelayMs && options.redeliverDelayMs > 0) {
        msg.nak(options.redeliverDelayMs);
      } else {
        msg.nak();
      }
  }
}

/** A decision and, when the message could not be settled, why. */
export type Handled<T> = MessageResult<T> & { settleError?: unknown };

/**
 * Decides msg with consumer (msg.headers) and settles it. Never throws: an
 * error settling msg is settleError, and JetStream delivers msg again after
 * the consumer's ack wait, for the guard to decide again.
 */
export async function handle<C, T>(
  consumer: MessageConsumer<C>,
  msg: JsMsg,
  effect: (ctx: C, stamp: Stamp) => Promise<T>,
  options: SettleOptions = {},
): Promise<Handled<T>> {
  const r: Handled<T> = await consumer.apply(msg.headers, effect);
  try {
    settle(msg, r.outcome, options);
  } catch (err) {
    r.settleError = err;
  }
  return r;
}
