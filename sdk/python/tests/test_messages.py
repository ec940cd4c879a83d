"""fenced.guards.messages: stamps (docs/guard-spec.md, section 8) read and written as Go's
fencemsg does, and the consumer's outcomes through the memory and PostgreSQL guards."""

from __future__ import annotations

import asyncio
import json
import os
import uuid

import pytest

import conftest
import fenced
from fenced.guards import Decision
from fenced.guards.amqp import read_stamp as amqp_read_stamp
from fenced.guards.memory import MemoryGuard
from fenced.guards.messages import (AsyncConsumer, Consumer, Outcome, Stamp, classify, decide, lease_stamp, read_stamp,
                                    stamp)
from fenced.guards.postgres import PostgresGuard

VECTORS = os.path.join(conftest.REPO, "fence", "fencemsg", "testdata", "stamps.json")
KINDS = {"missing-token": fenced.NoToken, "invalid-token": fenced.InvalidToken, "invalid-scope": fenced.InvalidScope,
         "invalid-sequence": fenced.InvalidSequence}


class FakeLease:
    def __init__(self, key, token, owner="worker-a", signature=""):
        self.key, self.token, self.owner, self.signature = key, token, owner, signature


def _stamp(v):
    return Stamp(v["scope"], int(v["token"]), int(v.get("sequence", "0")), v.get("owner", ""), v.get("signature", ""))


def _kind(err):
    kinds = [k for k, cls in KINDS.items() if isinstance(err, cls)]
    assert len(kinds) == 1, (err, kinds)
    return kinds[0]


def _vectors():
    with open(VECTORS, encoding="utf-8") as f:
        return json.load(f)


@pytest.mark.parametrize("case", _vectors()["read"], ids=lambda c: c["name"])
def test_read_vectors_shared_with_go(case):
    """Each case of fence/fencemsg/testdata/stamps.json, which Go's TestStampVectors reads too.
    A header with one value is given as a str, as bytes and as a one-item list; two values
    as a list (a header given twice)."""
    forms = [{k: v if len(v) > 1 else v[0] for k, v in case["headers"].items()},
             {k: [x.encode() for x in v] if len(v) > 1 else v[0].encode() for k, v in case["headers"].items()},
             dict(case["headers"])]
    for h in forms:
        if "stamp" in case:
            assert read_stamp(h) == _stamp(case["stamp"]), h
        else:
            with pytest.raises(fenced.FencedError) as e:
                read_stamp(h)
            assert _kind(e.value) == case["error"], (h, e.value)


@pytest.mark.parametrize("case", _vectors()["write"], ids=lambda c: c["name"])
def test_write_vectors_shared_with_go(case):
    s = _stamp(case["stamp"])
    h = {}
    s.write(h)
    assert h == case["headers"]
    assert all(type(v) is str for v in h.values())  # AMQP long strings, as pika encodes str
    assert read_stamp(h) == s and amqp_read_stamp(h) == s


def test_write_replaces_the_fencing_headers_and_removes_the_optional_ones():
    h = {"Fencing-Token": "1", "Fencing-Sequence": "99", "Fencing-Token-Signature": "old", "Other": 5}
    s = stamp(h, FakeLease("orders/7", 9), sequence=4)
    assert s == Stamp("orders/7", 9, 4, "worker-a", "")
    assert h == {"Fencing-Scope": "orders/7", "Fencing-Token": "9", "Fencing-Sequence": "4", "Fencing-Owner": "worker-a",
                 "Other": 5}
    stamp(h, FakeLease("orders/7", 10, owner="", signature="k.sig"))  # no sequence, no owner now
    assert h == {"Fencing-Scope": "orders/7", "Fencing-Token": "10", "Fencing-Token-Signature": "k.sig", "Other": 5}
    assert lease_stamp(FakeLease("k", 3, owner="bad\x00owner")) == Stamp("k", 3)  # an unprintable owner is left out


@pytest.mark.parametrize("s, kind", [
    (Stamp("s", 0), fenced.NoToken),
    (Stamp("s", 2**64), fenced.InvalidToken),
    (Stamp("s", -1), fenced.InvalidToken),
    (Stamp("", 1), fenced.InvalidScope),
    (Stamp("a\nb", 1), fenced.InvalidScope),
    (Stamp("s", 1, 2**63), fenced.InvalidSequence),
    (Stamp("s", 1, -1), fenced.InvalidSequence),
    (Stamp("s", True), fenced.InvalidToken),
    (Stamp("s", "5"), fenced.InvalidToken),
    (Stamp("s", 1, 1.0), fenced.InvalidSequence),
])
def test_a_bad_stamp_writes_nothing(s, kind):
    h = {"Fencing-Scope": "before", "Fencing-Token": "1", "Fencing-Owner": "o"}
    with pytest.raises(kind):
        s.write(h)
    assert h == {"Fencing-Scope": "before", "Fencing-Token": "1", "Fencing-Owner": "o"}


def test_sequence_bounds():
    ok = {"Fencing-Scope": "s", "Fencing-Token": "1"}
    assert read_stamp({**ok, "Fencing-Sequence": "1"}).sequence == 1
    assert read_stamp({**ok, "Fencing-Sequence": str(2**63 - 1)}).sequence == 2**63 - 1
    for bad in ("0", "012", "0" * 5000 + "12", str(2**63), str(2**64), "1" * 5000, "-1", " 1", "", "\u0661"):
        with pytest.raises(fenced.InvalidSequence):
            read_stamp({**ok, "Fencing-Sequence": bad})
    with pytest.raises(fenced.InvalidToken, match="exceeds the uint64 range"):
        read_stamp({**ok, "Fencing-Token": "9" * 5000})  # longer than int() parses: refused, not a ValueError


@pytest.mark.parametrize("value", [5, 5.0, True, None, {"a": "b"}, [b"1", 2]])
def test_a_fencing_header_that_is_not_text_is_refused_never_converted(value):
    ok = {"Fencing-Scope": "s", "Fencing-Token": "5", "Fencing-Sequence": "1"}
    for name, kind in (("Fencing-Scope", fenced.InvalidScope), ("Fencing-Token", fenced.InvalidToken),
                       ("Fencing-Sequence", fenced.InvalidSequence)):
        for read in (read_stamp, amqp_read_stamp):
            with pytest.raises(kind, match="not a string"):
                read({**ok, name: value})
    for name in ("Fencing-Owner", "Fencing-Token-Signature"):  # informational: dropped
        assert read_stamp({**ok, name: value}) == Stamp("s", 5, 1)
        assert amqp_read_stamp({**ok, name: value}) == Stamp("s", 5, 1)


def test_bytes_values():
    h = {"Fencing-Scope": "orders/\u00fc".encode(), "Fencing-Token": b"12", "Fencing-Sequence": bytearray(b"3"),
         "Fencing-Owner": b"w", "Fencing-Token-Signature": b"k.sig"}
    assert read_stamp(h) == Stamp("orders/\u00fc", 12, 3, "w", "k.sig")
    with pytest.raises(fenced.InvalidScope, match="UTF-8"):
        read_stamp({"Fencing-Scope": b"a\xff", "Fencing-Token": b"1"})  # not UTF-8
    with pytest.raises(fenced.InvalidToken):
        read_stamp({"Fencing-Scope": b"s", "Fencing-Token": b"1\xff"})
    assert read_stamp({"Fencing-Scope": "s", "Fencing-Token": "1", "Fencing-Owner": b"\xff"}).owner == ""


def test_amqp_arrays_are_not_strings():
    """An AMQP array (pika: list) is a value of its own type: refused even with one item,
    where the generic reader takes a list for the header's values."""
    h = {"Fencing-Scope": "s", "Fencing-Token": ["5"]}
    assert read_stamp(h) == Stamp("s", 5)
    with pytest.raises(fenced.InvalidToken, match="is a list"):
        amqp_read_stamp(h)
    with pytest.raises(fenced.NoToken):
        amqp_read_stamp(None)  # a message without headers


def test_classify():
    assert classify(None) is Outcome.APPLIED
    assert classify(fenced.StaleToken("s", 1, 2)) is Outcome.STALE
    assert classify(fenced.Duplicate("s", 1, 1, 1)) is Outcome.DUPLICATE
    for e in (fenced.NoToken(), fenced.InvalidToken(), fenced.InvalidScope(), fenced.InvalidSequence(),
              fenced.TokenOutOfRange(), fenced.BadSignature()):
        assert classify(e) is Outcome.REFUSED, e
    for e in (fenced.SequenceGap("s", 1, 3, 1), fenced.CommitUnknown(), RuntimeError("db down"),
              fenced.InvalidArgument("x"), fenced.CorruptToken()):
        assert classify(e) is Outcome.REDELIVER, e
    assert [o.done for o in Outcome] == [o is not Outcome.REDELIVER for o in Outcome]
    assert Outcome.APPLIED == "applied" and str(Outcome.REDELIVER) == "redeliver"


def msg(scope, token, seq=0, owner=""):
    h = {}
    Stamp(scope, token, seq, owner).write(h)
    return h


def test_consumer_outcomes_with_the_memory_guard():
    decisions = []
    c = Consumer(MemoryGuard(observer=decisions.append))
    applied = []

    def effect(name, fail=False):
        def run():
            if fail:
                raise RuntimeError("boom")
            applied.append(name)
            return name
        return run

    for name, h, fail, want in [
        ("first", msg("s", 5, 1), False, Outcome.APPLIED),
        ("next", msg("s", 5, 2), False, Outcome.APPLIED),
        ("redelivered", msg("s", 5, 2), False, Outcome.DUPLICATE),
        ("apply fails", msg("s", 5, 3), True, Outcome.REDELIVER),
        ("after the failure", msg("s", 5, 3), False, Outcome.APPLIED),
        ("new holder", msg("s", 6, 1, "B"), False, Outcome.APPLIED),
        ("old holder", msg("s", 5, 4, "A"), False, Outcome.STALE),
        ("unsequenced", msg("s", 6), False, Outcome.APPLIED),
        ("other scope", msg("t", 1), False, Outcome.APPLIED),
        ("no token", {"Fencing-Scope": "s"}, False, Outcome.REFUSED),
        ("bad sequence", {"Fencing-Scope": "s", "Fencing-Token": "9", "Fencing-Sequence": "0"}, False, Outcome.REFUSED),
    ]:
        r = c.apply(h, effect(name, fail))
        assert r.outcome is want, (name, r)
        assert (r.error is None) == (want is Outcome.APPLIED), (name, r)
        assert r.value == (name if want is Outcome.APPLIED else None)
    assert applied == ["first", "next", "after the failure", "new holder", "unsequenced", "other scope"]
    r = c.apply(msg("s", 2), effect("late"))
    assert isinstance(r.error, fenced.StaleToken) and (r.error.scope, r.error.presented, r.error.highest) == ("s", 2, 6)
    stale = [d for d in decisions if not d.accepted and not d.duplicate]
    assert stale == [Decision("s", 5, 6, False, "A"), Decision("s", 2, 6, False, "")]
    assert isinstance(c.apply({"Fencing-Scope": "s", "Fencing-Token": "0"}, effect("x")).error, fenced.InvalidToken)


def test_strict_guard_redelivers_a_gap_until_the_one_before_is_applied():
    c = Consumer(MemoryGuard(strict_sequences=True))
    got = [c.apply(msg("s", 4, q), lambda: None).outcome for q in (1, 3, 2, 3)]
    assert got == [Outcome.APPLIED, Outcome.REDELIVER, Outcome.APPLIED, Outcome.APPLIED]


def test_consumer_checks_its_guard():
    with pytest.raises(fenced.InvalidArgument, match="conn"):
        Consumer(PostgresGuard())  # its transactions need a connection
    with pytest.raises(fenced.InvalidArgument, match="no connection"):
        Consumer(MemoryGuard(), conn=object())
    with pytest.raises(fenced.InvalidArgument, match="decide"):
        Consumer(object())
    from fenced.guards.postgres_async import AsyncPostgresGuard

    with pytest.raises(fenced.InvalidArgument, match="AsyncConsumer"):
        Consumer(AsyncPostgresGuard(), conn=object())
    with pytest.raises(fenced.InvalidArgument, match="use Consumer"):
        AsyncConsumer(MemoryGuard())


def test_decide_with_any_guard_call():
    g = MemoryGuard()
    calls = []

    def call(s):
        calls.append(s)
        return g.do(s.scope, s.token, lambda: "done", **s.guard_kwargs())

    assert decide(msg("s", 3, 1, "w"), call) == (Outcome.APPLIED, None, "done", Stamp("s", 3, 1, "w"))
    assert decide(msg("s", 3, 1), call).outcome is Outcome.DUPLICATE
    assert decide({}, call).outcome is Outcome.REFUSED
    assert len(calls) == 2  # a refused stamp reaches no guard


def test_consumer_with_the_postgres_guard(pg, pg_table):
    """The effect's writes and the token commit in one transaction: a failed effect leaves
    neither, a duplicate or stale message writes nothing."""
    g = PostgresGuard(table=pg_table)
    g.migrate(pg)
    effects = pg_table + "_effects"
    with pg.cursor() as cur:
        cur.execute(f'CREATE TABLE "{effects}" (id text PRIMARY KEY)')
    pg.commit()
    try:
        c = Consumer(g, pg)
        s = "py-msg/" + uuid.uuid4().hex[:8]

        def insert(mid, fail=False):
            def run(cur):
                cur.execute(f'INSERT INTO "{effects}" VALUES (%s)', (mid,))
                if fail:
                    raise RuntimeError("fails after its write")
            return run

        assert c.apply(msg(s, 7, 1), insert("m1")).outcome is Outcome.APPLIED
        assert c.apply(msg(s, 7, 2), insert("m2", fail=True)).outcome is Outcome.REDELIVER
        assert g.highest(pg, s) == 7
        assert c.apply(msg(s, 7, 1), insert("m1 again")).outcome is Outcome.DUPLICATE
        assert c.apply(msg(s, 7, 2), insert("m2")).outcome is Outcome.APPLIED
        assert c.apply(msg(s, 8), insert("m3")).outcome is Outcome.APPLIED
        assert c.apply(msg(s, 7, 3), insert("stale")).outcome is Outcome.STALE
        assert c.apply(msg(s, 2**63), insert("huge")).outcome is Outcome.REFUSED  # above what the table stores
        with pg.cursor() as cur:
            cur.execute(f'SELECT id FROM "{effects}" ORDER BY id')
            assert [r[0] for r in cur.fetchall()] == ["m1", "m2", "m3"]
        pg.rollback()
    finally:
        pg.rollback()
        with pg.cursor() as cur:
            cur.execute(f'DROP TABLE IF EXISTS "{effects}"')
        pg.commit()


def test_async_consumer_with_the_async_postgres_guard():
    from fenced.guards.postgres_async import AsyncPostgresGuard

    table = "py_amsg_" + uuid.uuid4().hex[:10]

    async def main():
        try:
            import psycopg

            conn = await psycopg.AsyncConnection.connect(conftest.POSTGRES, connect_timeout=3)
        except Exception as e:  # ImportError or a connection failure
            conftest.unavailable("PostgreSQL via psycopg (async)", e)
        async with conn:
            g = AsyncPostgresGuard(table=table, strict_sequences=True)
            await g.migrate(conn)
            try:
                c = AsyncConsumer(g, conn)
                s = "py-amsg/" + uuid.uuid4().hex[:8]
                seen = []

                async def effect(cur):
                    await cur.execute("SELECT 1")
                    seen.append(1)

                got = [(await c.apply(h, effect)).outcome for h in
                       (msg(s, 3, 1), msg(s, 3, 3), msg(s, 3, 2), msg(s, 3, 2), msg(s, 2, 9), {"Fencing-Token": "3"})]
                assert got == [Outcome.APPLIED, Outcome.REDELIVER, Outcome.APPLIED, Outcome.DUPLICATE, Outcome.STALE,
                               Outcome.REFUSED]
                assert len(seen) == 2 and await g.highest(conn, s) == 3
            finally:
                await conn.rollback()
                await conn.execute(f'DROP TABLE IF EXISTS "{table}"')
                await conn.commit()

    asyncio.run(main())
