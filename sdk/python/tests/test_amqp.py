"""fenced.guards.amqp against the machine's RabbitMQ (pika), PostgreSQL and a real fenced:
the timeline of a stale producer (Go: fenceamqp's TestPausedProducer), and malformed stamps
dead-lettered. Every message ends applied once, stale, a duplicate of an applied one, or in
the dead-letter queue."""

from __future__ import annotations

import collections
import time
import uuid

import pytest

import fenced
from fenced import Client
from fenced.guards.amqp import decide, handle, stamp
from fenced.guards.messages import Consumer, Outcome
from fenced.guards.postgres import PostgresGuard
from fenced.report import Reporter


class Proc:
    """One process's connection to RabbitMQ: closing it is that process crashing, and the
    broker requeues what it held unacked."""

    def __init__(self, connect):
        self.conn = connect()
        self.ch = self.conn.channel()
        self.got = collections.deque()
        self.tag = None

    def confirm(self):
        self.ch.confirm_delivery()  # basic_publish raises unless the broker took the message
        return self

    def consume(self, queue, prefetch):
        self.ch.basic_qos(prefetch_count=prefetch)
        self.tag = self.ch.basic_consume(queue, lambda ch, m, p, b: self.got.append((m, p)), auto_ack=False)
        return self

    def next(self, timeout=10.0):
        """The next delivery: (method, properties)."""
        deadline = time.monotonic() + timeout
        while not self.got:
            left = deadline - time.monotonic()
            if left <= 0:
                pytest.fail(f"no delivery within {timeout}s")
            self.conn.process_data_events(time_limit=left)  # returns once a delivery is dispatched
        return self.got.popleft()

    def crash(self):
        self.conn.close()


def publish(proc, queue, mid, props_or_headers, lease=None, sequence=0):
    import pika

    if isinstance(props_or_headers, pika.BasicProperties):
        props = props_or_headers
    else:
        props = pika.BasicProperties(headers=props_or_headers)
    props.message_id, props.delivery_mode = mid, 2
    if lease is not None:
        stamp(props, lease, sequence)
    proc.ch.basic_publish("", queue, mid.encode(), props, mandatory=True)


class Sink:
    """The consumer side: a strict PostgreSQL guard whose effect records the message id in
    a table, in the guard's transaction; every outcome seen, per message."""

    def __init__(self, pg, table, observer):
        self.pg, self.effects = pg, table + "_effects"
        with pg.cursor() as cur:
            cur.execute(f'CREATE TABLE "{self.effects}" (id text PRIMARY KEY, token bigint NOT NULL)')
        pg.commit()
        self.guard = PostgresGuard(table=table, strict_sequences=True, observer=observer)
        self.guard.migrate(pg)
        self.consumer = Consumer(self.guard, pg)
        self.outcomes = collections.defaultdict(list)

    def effect(self, props):
        def write(cur):
            cur.execute(f'INSERT INTO "{self.effects}" VALUES (%s, %s)',
                        (props.message_id, int(props.headers["Fencing-Token"])))
        return write

    def handle(self, proc, delivery):
        method, props = delivery
        r = handle(self.consumer, proc.ch, method, props, self.effect(props))
        self.outcomes[props.message_id].append(r.outcome)
        return props.message_id, r

    def applied(self):
        with self.pg.cursor() as cur:
            cur.execute(f'SELECT id, token FROM "{self.effects}" ORDER BY id')
            rows = dict(cur.fetchall())
        self.pg.rollback()
        return rows

    def drop(self):
        self.pg.rollback()
        with self.pg.cursor() as cur:
            cur.execute(f'DROP TABLE IF EXISTS "{self.effects}"')
        self.pg.commit()


def settle_until(sink, proc, want, timeout=20.0):
    """Handle deliveries until each message of want got its outcome; a strict guard's gap
    (REDELIVER) on the way is allowed, nothing else."""
    want = dict(want)
    deadline = time.monotonic() + timeout
    while want:
        mid, r = sink.handle(proc, proc.next(max(0.1, deadline - time.monotonic())))
        if want.get(mid) is r.outcome:
            del want[mid]
        elif r.outcome is not Outcome.REDELIVER or not isinstance(r.error, fenced.SequenceGap):
            pytest.fail(f"{mid}: {r.outcome} ({r.error!r}); still waiting for {want}")


def test_stale_producer_redelivery_and_malformed_stamps(server, amqp_connect, pg, pg_table):
    scope = "orders/" + uuid.uuid4().hex[:10]
    queue = "py-fencemsg-" + uuid.uuid4().hex[:10]
    dlq = queue + "-dead"
    admin = Proc(amqp_connect)
    admin.ch.queue_declare(dlq)
    admin.ch.queue_declare(queue, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
    fc = Client(server.url)
    reporter = Reporter(fc, "py-orders-consumer", flush_interval=3600)
    sink = Sink(pg, pg_table, reporter)
    a = Client(server.url, ttl=1)
    b = Client(server.url)
    try:
        lease_a = a.acquire(scope, owner="A")
        producer_a = Proc(amqp_connect).confirm()

        # A consumer that will stall takes A's four messages, applies two and holds two.
        stalled = Proc(amqp_connect).consume(queue, 10)
        for i in range(1, 5):
            publish(producer_a, queue, f"a{i}", {}, lease_a, sequence=i)
        a5 = pika_props()
        stamp(a5, lease_a, 5)  # A stamps a5, then pauses before publishing it
        for want in ("a1", "a2"):
            mid, r = sink.handle(stalled, stalled.next())
            assert (mid, r.outcome) == (want, Outcome.APPLIED), r
        held = [stalled.next(), stalled.next()]
        assert [p.message_id for _, p in held] == ["a3", "a4"]
        stalled.ch.basic_cancel(stalled.tag)  # it stalls, holding a3 and a4 unacked

        # A pauses: no renewals. Its lease expires and B, waiting, gets a higher token.
        lease_a.orphan()
        lease_b = b.acquire(scope, wait=10, owner="B")
        assert lease_b.token > lease_a.token
        producer_b = Proc(amqp_connect).confirm()
        for i in range(1, 6):
            publish(producer_b, queue, f"b{i}", {}, lease_b, sequence=i)

        # A consumer applies b1, b2, commits b3 and crashes before acking it; it holds b4.
        crashing = Proc(amqp_connect).consume(queue, 10)
        for want in ("b1", "b2"):
            mid, r = sink.handle(crashing, crashing.next())
            assert (mid, r.outcome) == (want, Outcome.APPLIED), r
        method, props = crashing.next()
        r = decide(sink.consumer, props, sink.effect(props))  # committed, never acked
        assert (props.message_id, r.outcome) == ("b3", Outcome.APPLIED)
        assert crashing.next()[1].message_id == "b4"
        crashing.crash()

        # Its successor gets b3 again (a duplicate, not applied twice), b4 and b5.
        successor = Proc(amqp_connect).consume(queue, 10)
        settle_until(sink, successor, {"b3": Outcome.DUPLICATE, "b4": Outcome.APPLIED, "b5": Outcome.APPLIED})

        # The stalled consumer dies (RabbitMQ delivers a3 and a4 again) and A resumes and
        # publishes a5 with its old token: all three are stale, acked, not applied.
        stalled.crash()
        publish(producer_a, queue, "a5", a5)
        settle_until(sink, successor, {"a3": Outcome.STALE, "a4": Outcome.STALE, "a5": Outcome.STALE})

        # Malformed stamps are refused and dead-lettered; a token sent as bytes (an AMQP
        # byte array) is read as the same digits and applied.
        good = {"Fencing-Scope": scope, "Fencing-Token": str(lease_b.token), "Fencing-Sequence": "6"}
        malformed = {
            "m-no-token": {"Fencing-Scope": scope},
            "m-hex-token": {**good, "Fencing-Token": "0x10"},
            "m-int-token": {**good, "Fencing-Token": lease_b.token},
            "m-table-token": {**good, "Fencing-Token": {"v": str(lease_b.token)}},
            "m-bad-scope": {**good, "Fencing-Scope": "orders/\n7"},
            "m-sequence-0": {**good, "Fencing-Sequence": "0"},
            "m-sequence-2^63": {**good, "Fencing-Sequence": str(2**63)},
        }
        for mid, h in malformed.items():
            publish(producer_b, queue, mid, h)
        publish(producer_b, queue, "b6-bytes", {**good, "Fencing-Token": str(lease_b.token).encode()})
        settle_until(sink, successor, {**{mid: Outcome.REFUSED for mid in malformed}, "b6-bytes": Outcome.APPLIED})

        dead = Proc(amqp_connect).consume(dlq, 20)
        got = {}
        while len(got) < len(malformed):
            method, props = dead.next()
            got[props.message_id] = props.headers["x-death"][0]["reason"]
            dead.ch.basic_ack(method.delivery_tag)
        assert got == {mid: "rejected" for mid in malformed}

        # Every message is settled: none left ready or unacked.
        successor.crash()
        dead.crash()
        assert admin.ch.queue_declare(queue, passive=True).method.message_count == 0
        assert admin.ch.queue_declare(dlq, passive=True).method.message_count == 0

        # Applied once each: A's two early messages, B's six; none of the stale ones.
        applied = sink.applied()
        assert applied == {"a1": lease_a.token, "a2": lease_a.token, **{f"b{i}": lease_b.token for i in range(1, 6)},
                           "b6-bytes": lease_b.token}
        assert sink.outcomes["b3"] == [Outcome.DUPLICATE]  # the crashed consumer's copy was never settled
        assert sink.guard.highest(pg, scope) == lease_b.token
        sink.pg.rollback()

        # fenced lists the three stale messages as one rejection of A's token by B's.
        reporter.close()
        assert (reporter.sent, reporter.dropped) == (3, 0)
        (rej,), _ = fc.list_rejections(scope)
        assert (rej["resource"], rej["count"], rej["presentedToken"], rej["highestToken"], rej["reportedOwner"],
                rej["highestOwner"]) == ("py-orders-consumer", "3", str(lease_a.token), str(lease_b.token), "A", "B"), rej
        lease_b.release()
    finally:
        reporter.close()
        for c in (a, b, fc):
            c.close()
        if admin.conn.is_open:
            admin.ch.queue_delete(queue)
            admin.ch.queue_delete(dlq)
        sink.drop()


def pika_props():
    import pika

    return pika.BasicProperties()
