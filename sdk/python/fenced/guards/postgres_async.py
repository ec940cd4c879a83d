"""The PostgreSQL guard on asyncio, for psycopg 3's AsyncConnection.

The same scope table, statements and decisions as PostgresGuard
(docs/guard-spec.md, sections 2 and 7), awaited: a Go fencesql.Guard, a
PostgresGuard and an AsyncPostgresGuard on one table refuse each other's
stale tokens.

    guard = AsyncPostgresGuard()
    await guard.migrate(conn)                       # conn: psycopg.AsyncConnection
    async def write(cur):
        await cur.execute("UPDATE invoices SET ...")
    await guard.do_lease(conn, lease, write)        # lease: fenced.aio's or fenced's

Guarantees and non-guarantees are PostgresGuard's: the scope's row is
locked (SELECT ... FOR UPDATE) in the transaction that carries the
caller's writes, so they commit together with the raised highest token or
not at all; StaleToken, NoToken, TokenOutOfRange, InvalidScope and
InvalidSequence are raised before anything is written; a commit that
fails without the database saying it aborted the transaction raises
CommitUnknown (a task cancelled while COMMIT runs gets CancelledError, and
the outcome is just as unknown).
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Optional, Tuple, TypeVar

from .. import _scope
from ..errors import CorruptToken, Duplicate, FencedError, SequenceGap, StaleToken
from ..sign import Verifier, verify
from . import Decision, lease_owner, lost
from .postgres import SEQUENCE_COLUMNS, PostgresGuard, commit_failed, migrate_sequence_sql, quote_table, retryable, sql_token

T = TypeVar("T")


class AsyncPostgresGuard:
    """The scope table guard on asyncio (Go: fencesql.Guard, Postgres dialect). Stateless."""

    def __init__(self, table: str = "fence_scopes", observer: Optional[Callable[[Decision], None]] = None,
                 retries: int = 0, verifier: Optional[Verifier] = None, strict_sequences: bool = False) -> None:
        self._sql = PostgresGuard(table, observer, retries, verifier, strict_sequences)
        self.table, self.observer, self.retries = table, observer, retries
        self.verifier, self.strict_sequences = verifier, strict_sequences

    def create_table_sql(self) -> str:
        return self._sql.create_table_sql()

    async def migrate(self, conn: Any) -> None:
        """Create the table if it does not exist, add the sequence columns to one made
        before them (safe to run concurrently, as Go's Guard.Migrate), and commit."""
        async with conn.cursor() as cur:
            await cur.execute(self.create_table_sql())
        await conn.commit()
        for col, stmt in zip(SEQUENCE_COLUMNS, migrate_sequence_sql(self.table)):
            if await self._has_column(conn, col):
                continue
            try:
                async with conn.cursor() as cur:
                    await cur.execute(stmt)
                await conn.commit()
            except Exception:
                await conn.rollback()
                if not await self._has_column(conn, col):  # a concurrent migration may have added it
                    raise

    async def _has_column(self, conn: Any, col: str) -> bool:
        try:
            async with conn.cursor() as cur:
                await cur.execute("SELECT " + col + " FROM " + quote_table(self.table) + " WHERE 1 = 0")
            await conn.rollback()
            return True
        except Exception:
            await conn.rollback()
            return False

    async def _check(self, cur: Any, scope: str, tok: int, seq: int) -> int:
        """Lock the scope's row, decide, record; return the highest before (guard-spec 2 and 7)."""
        g = self._sql
        for _ in range(3):
            await cur.execute(g.seq_lock_sql if seq else g.lock_sql, (scope,))
            row = await cur.fetchone()
            if row is not None:
                h = int(row[0])
                if h < 0:
                    raise CorruptToken(f"fencesql: scope {scope!r} holds the token {h}, which no guard writes")
                if tok < h:
                    raise StaleToken(scope, tok, h)
                if not seq:
                    if tok > h:
                        await cur.execute(g.raise_sql, (tok, scope))
                    return h
                st, last = int(row[1]), int(row[2])
                if st != h or last < 0:
                    last = 0  # a guard without sequences raised the token: a new epoch
                if tok == h and seq <= last:
                    raise Duplicate(scope, tok, seq, last)
                if tok == h and self.strict_sequences and seq != last + 1:
                    raise SequenceGap(scope, tok, seq, last)
                await cur.execute(g.seq_raise_sql, (tok, tok, seq, scope))
                return h
            if seq:
                await cur.execute(g.seq_insert_sql, {"s": scope, "t": tok, "q": seq})
            else:
                await cur.execute(g.insert_sql, (scope, tok))
            if cur.rowcount == 1:
                return 0
        raise FencedError(f"fencesql: scope {scope!r} row keeps disappearing (deleted concurrently?)")

    def _validate(self, scope: str, token: int, signature: str, sequence: int) -> Tuple[int, int]:
        _scope.check(scope, token, 0)
        tok = sql_token(token)
        seq = PostgresGuard._sequence(sequence)
        verify(self.verifier, scope, token, signature)
        return tok, seq

    def _observe(self, d: Decision) -> None:
        if self.observer is not None:
            self.observer(d)

    async def check(self, cur: Any, scope: str, token: int, owner: str = "", signature: str = "",
                    sequence: int = 0) -> None:
        """Check token for scope inside the caller's transaction (cur: an AsyncCursor of it).

        On success the scope's row stays locked until the transaction ends and
        its highest token is raised with the caller's writes. After any error
        the caller must roll back.
        """
        tok, seq = self._validate(scope, token, signature, sequence)
        try:
            await self._check(cur, scope, tok, seq)
        except StaleToken as e:
            self._observe(Decision(scope, tok, e.highest, False, owner))
            raise
        except Duplicate:
            self._observe(Decision(scope, tok, tok, False, owner, duplicate=True))
            raise

    async def do(self, conn: Any, scope: str, token: int, fn: Callable[[Any], Awaitable[T]], owner: str = "",
                 signature: str = "", sequence: int = 0) -> T:
        """Begin, check, await fn(cursor), commit; roll back on any error. Returns fn's result.

        fn must write through the cursor it is given and must not commit.
        Contention aborts (SQLSTATE 40001, 40P01, 55P03) run the whole
        transaction again up to ``retries`` times; a stale token never.
        """
        tok, seq = self._validate(scope, token, signature, sequence)
        attempt = 0
        while True:
            try:
                return await self._attempt(conn, scope, tok, fn, owner, seq)
            except (StaleToken, Duplicate, SequenceGap):
                raise
            except Exception as e:
                if not retryable(e) or attempt >= self.retries:
                    raise
                attempt += 1

    async def _attempt(self, conn: Any, scope: str, tok: int, fn: Callable[[Any], Awaitable[T]], owner: str,
                       seq: int) -> T:
        committing = False
        try:
            async with conn.transaction():
                async with conn.cursor() as cur:
                    highest = await self._check(cur, scope, tok, seq)
                    result = await fn(cur)
                committing = True  # the transaction's exit commits
        except StaleToken as e:
            self._observe(Decision(scope, tok, e.highest, False, owner))
            raise
        except Duplicate:
            self._observe(Decision(scope, tok, tok, False, owner, duplicate=True))
            raise
        except Exception as e:
            if committing:
                raise commit_failed(scope, tok, e) from e
            raise
        self._observe(Decision(scope, tok, highest, True, owner))
        return result

    async def do_lease(self, conn: Any, lease: Any, fn: Callable[[Any], Awaitable[T]], sequence: int = 0) -> T:
        """do() with the lease's key, token, owner and signature; a stale rejection
        loses the lease first (a Duplicate does not: the write was applied before)."""
        try:
            return await self.do(conn, lease.key, lease.token, fn, owner=lease_owner(lease),
                                 signature=getattr(lease, "signature", ""), sequence=sequence)
        except StaleToken as e:
            lost(lease, e)
            raise

    async def highest(self, conn: Any, scope: str) -> int:
        """The highest token accepted for scope (0 if none), read without locking."""
        _scope.validate_scope(scope)
        idle = int(conn.info.transaction_status) == 0
        async with conn.cursor() as cur:
            await cur.execute(self._sql.highest_sql, (scope,))
            row = await cur.fetchone()
        if idle and int(conn.info.transaction_status) != 0:
            await conn.rollback()  # end the transaction the read began
        return int(row[0]) if row else 0
