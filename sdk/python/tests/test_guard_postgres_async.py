"""AsyncPostgresGuard (psycopg 3 async) against the machine's PostgreSQL: the decisions
of docs/guard-spec.md, and one table shared with the sync guard."""

from __future__ import annotations

import asyncio
import uuid

import pytest

import conftest
import fenced
from fenced.guards.postgres import PostgresGuard
from fenced.guards.postgres_async import AsyncPostgresGuard


class FakeLease:
    def __init__(self, key, token, owner="w1"):
        self.key, self.token, self.owner, self.signature = key, token, owner, ""
        self.lost = []

    def report_lost(self, err):
        self.lost.append(err)


async def connect():
    try:
        import psycopg

        return await psycopg.AsyncConnection.connect(conftest.POSTGRES, connect_timeout=3)
    except Exception as e:  # ImportError or a connection failure
        conftest.unavailable("PostgreSQL via psycopg (async)", e)


@pytest.fixture
def table():
    name = "py_afence_" + uuid.uuid4().hex[:10]
    yield name

    async def drop():
        conn = await connect()
        async with conn:
            await conn.execute(f'DROP TABLE IF EXISTS "{name}"')
            await conn.commit()

    asyncio.run(drop())


def scope():
    return "py-aguard/" + uuid.uuid4().hex[:10]


async def nothing(cur):
    return None


def test_accepts_equal_and_higher_refuses_lower(table):
    async def main():
        decisions = []
        g = AsyncPostgresGuard(table=table, observer=decisions.append)
        conn = await connect()
        async with conn:
            await g.migrate(conn)
            s = scope()
            await conn.execute(f'CREATE TEMP TABLE writes (token bigint)')
            await conn.commit()

            def write(t):
                async def fn(cur):
                    await cur.execute("INSERT INTO writes VALUES (%s)", (t,))
                    return t
                return fn

            assert await g.do(conn, s, 5, write(5)) == 5
            assert await g.do(conn, s, 5, write(5)) == 5  # equal tokens pass
            with pytest.raises(fenced.StaleToken) as e:
                await g.do(conn, s, 4, write(4))
            assert (e.value.scope, e.value.presented, e.value.highest) == (s, 4, 5)
            await g.do(conn, s, 2**63 - 1, write(7))
            assert await g.highest(conn, s) == 2**63 - 1
            rows = await (await conn.execute("SELECT token FROM writes ORDER BY token")).fetchall()
            assert rows == [(5,), (5,), (7,)]  # the stale write rolled back with its check
            await conn.rollback()
            assert [(d.presented, d.highest, d.accepted) for d in decisions] == [
                (5, 0, True), (5, 5, True), (4, 5, False), (2**63 - 1, 5, True)]
            for bad, err in ((0, fenced.NoToken), (2**63, fenced.TokenOutOfRange)):
                with pytest.raises(err):
                    await g.do(conn, s, bad, nothing)
            with pytest.raises(fenced.InvalidScope):
                await g.do(conn, "bad\x00scope", 1, nothing)
            assert len(decisions) == 4  # refused before anything was read

    asyncio.run(main())


def test_failed_write_records_nothing_and_check_joins_the_callers_transaction(table):
    async def main():
        g = AsyncPostgresGuard(table=table)
        conn = await connect()
        async with conn:
            await g.migrate(conn)
            s = scope()

            async def boom(cur):
                raise RuntimeError("the write failed")

            with pytest.raises(RuntimeError):
                await g.do(conn, s, 9, boom)
            assert await g.highest(conn, s) == 0
            async with conn.transaction():
                async with conn.cursor() as cur:
                    await g.check(cur, s, 3)
            assert await g.highest(conn, s) == 3
            with pytest.raises(fenced.StaleToken):
                async with conn.transaction():
                    async with conn.cursor() as cur:
                        await g.check(cur, s, 2)

    asyncio.run(main())


def test_shares_the_table_with_the_sync_guard(table):
    """The sync and async guards read and raise one highest token (as Go's fencesql does)."""
    async def main():
        import psycopg

        g = AsyncPostgresGuard(table=table)
        sync_conn = psycopg.connect(conftest.POSTGRES, connect_timeout=3)
        sync = PostgresGuard(table=table)
        conn = await connect()
        async with conn:
            await g.migrate(conn)
            s = scope()
            sync.do(sync_conn, s, 10, lambda cur: None)
            with pytest.raises(fenced.StaleToken):
                await g.do(conn, s, 9, nothing)
            await g.do(conn, s, 11, nothing)
            with pytest.raises(fenced.StaleToken):
                sync.do(sync_conn, s, 10, lambda cur: None)
        sync_conn.close()

    asyncio.run(main())


def test_one_scope_is_serialized_across_connections(table):
    """Two transactions on one scope: the second waits for the first's row lock, then
    sees its token; the lower token is refused whichever order they run in."""
    async def main():
        g = AsyncPostgresGuard(table=table)
        a, b = await connect(), await connect()
        async with a, b:
            await g.migrate(a)
            s = scope()
            started = asyncio.Event()

            async def slow(cur):
                started.set()
                await asyncio.sleep(0.3)

            first = asyncio.create_task(g.do(a, s, 8, slow))
            await started.wait()
            with pytest.raises(fenced.StaleToken) as e:
                await g.do(b, s, 7, nothing)  # blocks on the row lock until 8 commits
            assert e.value.highest == 8
            await first

    asyncio.run(main())


def test_sequences_and_do_lease(table):
    async def main():
        g = AsyncPostgresGuard(table=table)
        strict = AsyncPostgresGuard(table=table, strict_sequences=True)
        conn = await connect()
        async with conn:
            await g.migrate(conn)
            s = scope()
            await g.do(conn, s, 3, nothing, sequence=4)
            with pytest.raises(fenced.Duplicate) as e:
                await g.do(conn, s, 3, nothing, sequence=4)
            assert (e.value.sequence, e.value.last) == (4, 4)
            with pytest.raises(fenced.SequenceGap):
                await strict.do(conn, s, 3, nothing, sequence=6)
            await strict.do(conn, s, 3, nothing, sequence=5)
            await g.do(conn, s, 4, nothing)  # a new epoch without a sequence ends the old one's
            await g.do(conn, s, 4, nothing, sequence=1)
            with pytest.raises(fenced.InvalidSequence):
                await g.do(conn, s, 4, nothing, sequence=2**63)
            dup = FakeLease(s, 4)
            with pytest.raises(fenced.Duplicate):
                await g.do_lease(conn, dup, nothing, sequence=1)
            assert not dup.lost  # a duplicate does not lose the lease
            stale = FakeLease(s, 2)
            with pytest.raises(fenced.StaleToken):
                await g.do_lease(conn, stale, nothing)
            assert isinstance(stale.lost[0], fenced.StaleToken)

    asyncio.run(main())


def test_with_a_real_aio_lease(server, key, table):
    from fenced import aio

    async def main():
        g = AsyncPostgresGuard(table=table)
        conn = await connect()
        async with conn, aio.Client(server.url, ttl=2) as client:
            await g.migrate(conn)
            old = await client.acquire(key)
            await old.release()
            async with client.acquire(key) as new:
                await g.do_lease(conn, new, nothing)
                with pytest.raises(fenced.StaleToken):
                    await g.do_lease(conn, old, nothing)
                new.check()

    asyncio.run(main())


class _Cursor:
    rowcount = 1

    def __init__(self):
        self.sql = []

    def execute(self, sql, params=None):
        self.sql.append(sql)

    def fetchone(self):
        return None  # no row yet: the guard inserts one

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


class _ACursor(_Cursor):
    async def execute(self, sql, params=None):
        self.sql.append(sql)

    async def fetchone(self):
        return None

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        return None


class _Commit:
    """A transaction whose COMMIT fails with err (a psycopg 3 connection's transaction())."""

    def __init__(self, err):
        self.err = err

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            raise self.err

    async def __aenter__(self):
        return self

    async def __aexit__(self, exc_type, exc, tb):
        self.__exit__(exc_type, exc, tb)


class _Conn:
    pgconn = object()  # a psycopg 3 connection, as the sync guard tells them

    def __init__(self, err, cursor):
        self.err, self.cur = err, cursor

    def transaction(self):
        return _Commit(self.err)

    def cursor(self):
        return self.cur


def _commit_errors():
    import psycopg

    broken = psycopg.OperationalError("consuming input failed: server closed the connection unexpectedly")

    class Serialization(psycopg.errors.SerializationFailure):
        pass

    return broken, Serialization("could not serialize access")


def test_a_commit_that_fails_unanswered_is_commit_unknown():
    """guard-spec section 2: only the database aborting the transaction is a certain
    rollback; a COMMIT whose connection broke has an unknown outcome."""
    broken, serialization = _commit_errors()
    assert serialization.sqlstate == "40001"
    sync = PostgresGuard()
    with pytest.raises(fenced.CommitUnknown) as e:
        sync.do(_Conn(broken, _Cursor()), "s", 3, lambda cur: None)
    assert e.value.__cause__ is broken
    with pytest.raises(type(serialization)):
        sync.do(_Conn(serialization, _Cursor()), "s", 3, lambda cur: None)

    async def main():
        g = AsyncPostgresGuard()
        with pytest.raises(fenced.CommitUnknown):
            await g.do(_Conn(broken, _ACursor()), "s", 3, nothing)
        with pytest.raises(type(serialization)):
            await g.do(_Conn(serialization, _ACursor()), "s", 3, nothing)

        async def boom(cur):
            raise psycopg.OperationalError("the write failed")  # before COMMIT: a certain rollback

        import psycopg

        with pytest.raises(psycopg.OperationalError):
            await g.do(_Conn(broken, _ACursor()), "s", 3, boom)

    asyncio.run(main())
