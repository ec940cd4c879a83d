"""RabbitMQ through pika: fenced messages on AMQP 0-9-1 (Go: fence/fencemsg/fenceamqp).

Producers stamp a message's properties with their lease; consumers decide
each delivery with a fenced.guards.messages Consumer and settle it by the
outcome, as docs/guard-spec.md, section 8, says:

    props = pika.BasicProperties(delivery_mode=2)
    stamp(props, lease, sequence=n)                 # a re-sent message keeps its stamp
    channel.basic_publish("", "orders", body, props, mandatory=True)

    consumer = Consumer(PostgresGuard(strict_sequences=True, observer=reporter), conn)

    def on_message(ch, method, props, body):        # basic_consume(..., auto_ack=False)
        handle(consumer, ch, method, props,
               lambda cur: cur.execute("UPDATE orders SET status = %s WHERE id = 7", (body.decode(),)))

The fencing headers are entries of the message's headers table of type long
string (pika: str); a byte array (bytes) is read as the same bytes. An entry
of any other type (a number, a table, an array) is refused for
Fencing-Scope, Fencing-Token and Fencing-Sequence and dropped for
Fencing-Owner and Fencing-Token-Signature, never converted.

handle settles after the guard's decision is final (after the commit):
APPLIED, STALE and DUPLICATE are acked, REFUSED is rejected without requeue
(dead-lettered if the queue has a dead-letter exchange), REDELIVER is nacked
with requeue. RabbitMQ requeues at once, so a message that keeps failing
comes back as fast as it is taken: keep a scope's messages in order (one
consumer, prefetch 1) or bound the redeliveries (a quorum queue's
x-delivery-limit with a dead-letter exchange).

This module does not import pika: it uses a channel's basic_ack,
basic_reject and basic_nack and a properties object's headers, which
pika's BlockingChannel and its asynchronous Channel both have.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Mapping, Optional

from ..errors import FencedError
from . import messages
from .http import HEADER_SCOPE, HEADER_SEQUENCE, HEADER_TOKEN
from .messages import Consumer, Outcome, Result, Stamp

_REFUSED_IF_NOT_TEXT = (HEADER_SCOPE, HEADER_TOKEN, HEADER_SEQUENCE)


def stamp(properties: Any, lease: Any, sequence: int = 0) -> Stamp:
    """Set the fencing headers of a message published under lease in properties.headers
    (a pika.BasicProperties; the dict is made if None) and return the stamp. See
    fenced.guards.messages.stamp; publish a re-sent message with the same properties."""
    headers: Dict[str, Any] = properties.headers if properties.headers is not None else {}
    s = messages.stamp(headers, lease, sequence)
    properties.headers = headers
    return s


def read_stamp(headers: Optional[Mapping[str, Any]]) -> Stamp:
    """fenced.guards.messages.read_stamp with AMQP's types: a fencing entry that is not str
    or bytes (a number, a table, an array) is refused (scope, token, sequence, with the
    error of its header) or dropped (owner, signature)."""
    h = headers if headers is not None else {}
    fencing: Dict[str, Any] = {}
    for name in messages.NAMES:
        if name not in h:
            continue
        v = h[name]
        if isinstance(v, (str, bytes)):
            fencing[name] = v
        elif name in _REFUSED_IF_NOT_TEXT:
            raise messages.wrong_type(name, v)
    return messages.read_stamp(fencing)


def decide(consumer: Consumer, properties: Any, effect: Callable[..., Any]) -> Result:
    """The outcome of a delivery whose properties (pika.BasicProperties) are given, without
    settling it: read_stamp (REFUSED if it fails), then consumer.apply_stamp(stamp, effect)."""
    try:
        s = read_stamp(properties.headers)
    except FencedError as e:
        return Result(Outcome.REFUSED, e)
    return consumer.apply_stamp(s, effect)


def settle(channel: Any, delivery_tag: int, outcome: Outcome) -> None:
    """Settle one delivery by its outcome: APPLIED, STALE, DUPLICATE: basic_ack; REFUSED:
    basic_reject with requeue=False; REDELIVER: basic_nack with requeue=True."""
    if outcome in (Outcome.APPLIED, Outcome.STALE, Outcome.DUPLICATE):
        channel.basic_ack(delivery_tag=delivery_tag)
    elif outcome is Outcome.REFUSED:
        channel.basic_reject(delivery_tag=delivery_tag, requeue=False)
    else:
        channel.basic_nack(delivery_tag=delivery_tag, requeue=True)


def handle(consumer: Consumer, channel: Any, method: Any, properties: Any, effect: Callable[..., Any]) -> Result:
    """Decide a delivery (decide) and settle it (settle); the arguments of a pika
    on_message_callback, then the effect. The delivery must come from a consumer without
    auto-ack. An error settling it (the channel closed) is raised: RabbitMQ then delivers
    the message again, and the guard decides it again (with a sequence, a DUPLICATE)."""
    result = decide(consumer, properties, effect)
    settle(channel, method.delivery_tag, result.outcome)
    return result
