"""PostgreSQL guards: Go fencesql's scope table and statements, in the caller's transaction.

Works with psycopg 3 and psycopg2 connections. The table, its DDL and every
statement are those of docs/guard-spec.md, section 2, so a Go
fencesql.Guard and a PostgresGuard on one table see each other's highest
tokens.

    guard = PostgresGuard()
    guard.migrate(conn)
    guard.do(conn, lease.key, lease.token, lambda cur: cur.execute("UPDATE ..."))

Guarantees: a write made through do(), or in a transaction after check()
returned, commits only if no transaction that committed before it accepted
a higher token for the scope, atomically with the raised highest token.
StaleToken carries the highest read from the table; token 0 raises
NoToken, a token above 2**63-1 TokenOutOfRange, a bad scope InvalidScope,
all before any statement.

Non-guarantees: a commit that fails without the database saying it aborted
the transaction (the connection broke) raises CommitUnknown: the writes and
the token are committed together, or neither. A stale rejection leaves the
caller's transaction to roll back (do() does it).
"""

from __future__ import annotations

import contextvars
import re
from typing import Any, Callable, List, Optional

from .. import _scope
from ..sign import Verifier, verify
from ..errors import (CommitUnknown, CorruptToken, Duplicate, FencedError, InvalidArgument, InvalidSequence, RowNotFound,
                      SequenceGap, StaleToken, TokenOutOfRange)
from . import Decision, lease_owner, lost

DEFAULT_TABLE = "fence_scopes"
DEFAULT_TOKEN_COLUMN = "fence_token"
MAX_SQL_TOKEN = 2**63 - 1
RETRYABLE_SQLSTATES = ("40001", "40P01", "55P03")

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}\Z")


def quote_table(name: str) -> str:
    parts = name.split(".")
    if len(parts) > 2 or not all(_IDENT.match(p) for p in parts):
        raise InvalidArgument(f"fencesql: invalid SQL identifier: table {name!r}")
    return ".".join(f'"{p}"' for p in parts)


def quote_column(name: str) -> str:
    if not _IDENT.match(name):
        raise InvalidArgument(f"fencesql: invalid SQL identifier: column {name!r}")
    return f'"{name}"'


def create_table_sql(table: str = DEFAULT_TABLE) -> str:
    """The CREATE TABLE of Go's fencesql.CreateTableSQL(Postgres, table), byte for byte."""
    return ("CREATE TABLE IF NOT EXISTS " + quote_table(table) + " (\n"
            "    scope          varchar(512) PRIMARY KEY,\n"
            "    highest_token  bigint NOT NULL CHECK (highest_token >= 0),\n"
            "    sequence_token bigint NOT NULL DEFAULT 0,\n"
            "    last_sequence  bigint NOT NULL DEFAULT 0\n"
            ")")


SEQUENCE_COLUMNS = ("sequence_token", "last_sequence")


def migrate_sequence_sql(table: str = DEFAULT_TABLE) -> List[str]:
    """Go's fencesql.MigrateSequenceSQL: the columns a table made before sequences lacks.

    This guard writes no sequences (docs/guard-spec.md, section 7); it keeps
    the table Go's guards share in the shape they expect."""
    t = quote_table(table)
    return ["ALTER TABLE " + t + " ADD COLUMN " + c + " BIGINT NOT NULL DEFAULT 0" for c in SEQUENCE_COLUMNS]


def sql_token(token: int) -> int:
    if not token:
        from ..errors import NoToken

        raise NoToken("missing fencing token")
    if token > MAX_SQL_TOKEN:
        raise TokenOutOfRange(f"fencing token out of the guard's range: {token}")
    return token


def retryable(err: BaseException) -> bool:
    """Whether the database aborted the transaction for contention (run it again)."""
    code = getattr(err, "sqlstate", None) or getattr(err, "pgcode", None)
    return code in RETRYABLE_SQLSTATES


def commit_failed(scope: str, tok: int, err: Exception) -> Exception:
    """What a failed COMMIT raises (docs/guard-spec.md, section 2): the database
    aborting the transaction for contention is a certain rollback (err as is);
    anything else leaves the outcome unknown (CommitUnknown)."""
    if retryable(err):
        return err
    e = CommitUnknown(f"fencesql: commit of scope {scope!r} token {tok} failed ({type(err).__name__}: {err}); "
                      "the writes and the token are both committed or both not")
    e.__cause__ = err
    return e


def _is_psycopg3(conn: Any) -> bool:
    return hasattr(conn, "transaction") and hasattr(conn, "pgconn")


_current = contextvars.ContextVar("fenced_pg_cursor", default=None)


def current_cursor() -> Any:
    """The cursor of the transaction a TxGuard opened for the running handler."""
    cur = _current.get()
    if cur is None:
        raise FencedError("no fenced PostgreSQL transaction in this context")
    return cur


class PostgresGuard:
    """The scope table guard (Go: fencesql.Guard with the Postgres dialect). Stateless; thread-safe."""

    def __init__(self, table: str = DEFAULT_TABLE, observer: Optional[Callable[[Decision], None]] = None,
                 retries: int = 0, verifier: Optional[Verifier] = None, strict_sequences: bool = False) -> None:
        t = quote_table(table)
        if retries < 0:
            raise InvalidArgument(f"fencesql: retries is {retries}, must not be negative")
        self.table, self.observer, self.retries, self.verifier = table, observer, retries, verifier
        self.strict_sequences = strict_sequences
        self.lock_sql = "SELECT highest_token FROM " + t + " WHERE scope = %s FOR UPDATE"
        self.insert_sql = "INSERT INTO " + t + " (scope, highest_token) VALUES (%s, %s) ON CONFLICT (scope) DO NOTHING"
        self.raise_sql = "UPDATE " + t + " SET highest_token = %s WHERE scope = %s"
        self.highest_sql = "SELECT highest_token FROM " + t + " WHERE scope = %s"
        # Sequenced writes (docs/guard-spec.md, section 7) also read and write the sequence columns.
        cols = "highest_token, sequence_token, last_sequence"
        self.seq_lock_sql = "SELECT " + cols + " FROM " + t + " WHERE scope = %s FOR UPDATE"
        self.seq_insert_sql = ("INSERT INTO " + t + " (scope, " + cols + ") VALUES (%(s)s, %(t)s, %(t)s, %(q)s)"
                               " ON CONFLICT (scope) DO NOTHING")
        self.seq_raise_sql = ("UPDATE " + t + " SET highest_token = %s, sequence_token = %s, last_sequence = %s"
                              " WHERE scope = %s")

    def create_table_sql(self) -> str:
        return create_table_sql(self.table)

    def migrate(self, conn: Any) -> None:
        """Create the table if it does not exist, add the sequence columns to one made
        before them (as Go's Guard.Migrate does, safe to run concurrently), and commit."""
        with conn.cursor() as cur:
            cur.execute(self.create_table_sql())
        conn.commit()
        for col, stmt in zip(SEQUENCE_COLUMNS, migrate_sequence_sql(self.table)):
            if self._has_column(conn, col):
                continue
            try:
                with conn.cursor() as cur:
                    cur.execute(stmt)
                conn.commit()
            except Exception:
                conn.rollback()
                if not self._has_column(conn, col):  # a concurrent migration may have added it
                    raise

    def _has_column(self, conn: Any, col: str) -> bool:
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT " + col + " FROM " + quote_table(self.table) + " WHERE 1 = 0")
            conn.rollback()
            return True
        except Exception:
            conn.rollback()
            return False

    def _observe(self, scope: str, presented: int, highest: int, accepted: bool, owner: str) -> None:
        if self.observer is not None:
            self.observer(Decision(scope, presented, highest, accepted, owner))

    def _check(self, cur: Any, scope: str, tok: int, seq: int = 0) -> int:
        """Lock the scope's row, compare, raise; return the highest before."""
        if seq:
            return self._check_sequence(cur, scope, tok, seq)
        for _ in range(3):
            cur.execute(self.lock_sql, (scope,))
            row = cur.fetchone()
            if row is not None:
                h = int(row[0])
                if h < 0:
                    raise CorruptToken(f"fencesql: scope {scope!r} holds the token {h}, which no guard writes")
                if tok < h:
                    raise StaleToken(scope, tok, h)
                if tok > h:
                    cur.execute(self.raise_sql, (tok, scope))
                return h
            cur.execute(self.insert_sql, (scope, tok))
            if cur.rowcount == 1:
                return 0
        raise FencedError(f"fencesql: scope {scope!r} row keeps disappearing (deleted concurrently?)")

    def _check_sequence(self, cur: Any, scope: str, tok: int, seq: int) -> int:
        for _ in range(3):
            cur.execute(self.seq_lock_sql, (scope,))
            row = cur.fetchone()
            if row is not None:
                h, st, last = (int(x) for x in row)
                if h < 0:
                    raise CorruptToken(f"fencesql: scope {scope!r} holds the token {h}, which no guard writes")
                if st != h or last < 0:
                    last = 0  # a guard without sequences raised the token: a new epoch
                if tok < h:
                    raise StaleToken(scope, tok, h)
                if tok == h and seq <= last:
                    raise Duplicate(scope, tok, seq, last)
                if tok == h and self.strict_sequences and seq != last + 1:
                    raise SequenceGap(scope, tok, seq, last)
                cur.execute(self.seq_raise_sql, (tok, tok, seq, scope))
                return h
            cur.execute(self.seq_insert_sql, {"s": scope, "t": tok, "q": seq})
            if cur.rowcount == 1:
                return 0
        raise FencedError(f"fencesql: scope {scope!r} row keeps disappearing (deleted concurrently?)")

    @staticmethod
    def _sequence(seq: int) -> int:
        if seq < 0 or seq > MAX_SQL_TOKEN:
            raise InvalidSequence(f"invalid fencing sequence: {seq} is outside 1..{MAX_SQL_TOKEN}")
        return seq

    def check(self, cur: Any, scope: str, token: int, owner: str = "", signature: str = "", sequence: int = 0) -> None:
        """Check token for scope inside the caller's transaction (cur: a cursor of it).

        On success the scope's row stays locked until the transaction ends and
        its highest token is raised with the caller's writes. After any error
        the caller must roll back.
        """
        _scope.check(scope, token, 0)
        tok = sql_token(token)
        seq = self._sequence(sequence)
        verify(self.verifier, scope, token, signature)
        try:
            self._check(cur, scope, tok, seq)
        except StaleToken as e:
            self._observe(scope, tok, e.highest, False, owner)
            raise
        except Duplicate as e:
            self._observe_duplicate(scope, tok, owner)
            raise

    def do(self, conn: Any, scope: str, token: int, fn: Callable[[Any], Any], owner: str = "", signature: str = "",
           sequence: int = 0) -> Any:
        """Begin, check, fn(cursor), commit; roll back on any error. Returns fn's result.

        fn must write through the cursor it is given and must not commit.
        """
        _scope.check(scope, token, 0)
        tok = sql_token(token)
        seq = self._sequence(sequence)
        verify(self.verifier, scope, token, signature)
        attempt = 0
        while True:
            try:
                return self._attempt(conn, scope, tok, fn, owner, seq)
            except (StaleToken, Duplicate, SequenceGap):
                raise
            except Exception as e:
                if not retryable(e) or attempt >= self.retries:
                    raise
                attempt += 1

    def _observe_duplicate(self, scope: str, tok: int, owner: str) -> None:
        if self.observer is not None:
            self.observer(Decision(scope, tok, tok, False, owner, duplicate=True))

    def _attempt(self, conn: Any, scope: str, tok: int, fn: Callable[[Any], Any], owner: str, seq: int = 0) -> Any:
        highest = None
        committing = False
        if _is_psycopg3(conn):
            try:
                with conn.transaction():
                    with conn.cursor() as cur:
                        highest = self._check(cur, scope, tok, seq)
                        result = fn(cur)
                    committing = True  # the transaction's exit commits
            except StaleToken as e:
                self._observe(scope, tok, e.highest, False, owner)
                raise
            except Duplicate:
                self._observe_duplicate(scope, tok, owner)
                raise
            except Exception as e:
                if committing:
                    raise commit_failed(scope, tok, e) from e
                raise
        else:
            try:
                with conn.cursor() as cur:
                    highest = self._check(cur, scope, tok, seq)
                    result = fn(cur)
                committing = True
                conn.commit()
            except StaleToken as e:
                conn.rollback()
                self._observe(scope, tok, e.highest, False, owner)
                raise
            except Duplicate:
                conn.rollback()
                self._observe_duplicate(scope, tok, owner)
                raise
            except Exception as e:
                conn.rollback()
                if committing:
                    raise commit_failed(scope, tok, e) from e
                raise
            except BaseException:
                conn.rollback()
                raise
        self._observe(scope, tok, highest, True, owner)
        return result

    def do_lease(self, conn: Any, lease: Any, fn: Callable[[Any], Any], sequence: int = 0) -> Any:
        """do() with the lease's key and token; a stale rejection loses the lease first
        (a Duplicate does not: the write was applied before)."""
        try:
            return self.do(conn, lease.key, lease.token, fn, owner=lease_owner(lease),
                           signature=getattr(lease, "signature", ""), sequence=sequence)
        except StaleToken as e:
            lost(lease, e)
            raise

    def highest(self, conn: Any, scope: str) -> int:
        """The highest token accepted for scope (0 if none), read without locking."""
        _scope.validate_scope(scope)
        idle = _tx_status(conn) == 0
        with conn.cursor() as cur:
            cur.execute(self.highest_sql, (scope,))
            row = cur.fetchone()
        if idle and _tx_status(conn) != 0:
            conn.rollback()  # end the transaction the read began
        return int(row[0]) if row else 0

    def tx_guard(self, connect: Callable[[], Any]) -> "TxGuard":
        """A guard for the HTTP middleware: each request runs in a transaction on a
        connection from connect(), its cursor in current_cursor()."""
        return TxGuard(self, connect)


def _tx_status(conn: Any) -> int:
    """0 when the connection is not inside a transaction (psycopg 3 and psycopg2 agree)."""
    if _is_psycopg3(conn):
        return int(conn.info.transaction_status)
    return int(conn.get_transaction_status())


class TxGuard:
    """do(scope, token, apply, owner, signature, sequence) runs apply() inside a checked
    transaction (Go: TxGuard), with the arguments of MemoryGuard.do."""

    def __init__(self, guard: PostgresGuard, connect: Callable[[], Any]):
        self.guard, self.connect = guard, connect

    def do(self, scope: str, token: int, apply: Callable[[], Any], owner: str = "", signature: str = "",
           sequence: int = 0) -> Any:
        conn = self.connect()
        try:
            def fn(cur: Any) -> Any:
                reset = _current.set(cur)
                try:
                    return apply()
                finally:
                    _current.reset(reset)

            return self.guard.do(conn, scope, token, fn, owner, signature, sequence)
        finally:
            close = getattr(conn, "close", None)
            if close:
                close()


class RowFence:
    """Row-level tokens (Go: fencesql.RowFence): an UPDATE that goes through only with a token
    at least the row's. No scope table, no transaction needed; updates of existing rows only."""

    def __init__(self, table: str, id_column: str = "id", token_column: str = DEFAULT_TOKEN_COLUMN,
                 observer: Optional[Callable[[Decision], None]] = None):
        self.table = table
        self.t, self.idc, self.tokc = quote_table(table), quote_column(id_column), quote_column(token_column)
        if id_column == token_column:
            raise InvalidArgument(f"fencesql: id and token column are both {id_column!r}")
        self.token_column, self.observer = token_column, observer
        self.read_sql = f"SELECT {self.tokc} FROM {self.t} WHERE {self.idc} = %s FOR UPDATE"

    def add_column_sql(self) -> str:
        return f"ALTER TABLE {self.t} ADD COLUMN {self.tokc} BIGINT NOT NULL DEFAULT 0"

    def update(self, cur: Any, id: Any, token: int, owner: str = "", **values: Any) -> None:
        """UPDATE table SET values..., token_column = token WHERE id = id AND 0 <= token_column <= token.

        RowNotFound when there is no such row; StaleToken (scope "table/id")
        when the row carries a higher token.
        """
        tok = sql_token(token)
        # Named parameters, so that the token is bound once and used twice, as $n is in Go.
        sets, named = [], {"tok": tok, "id": id}
        for i, (col, v) in enumerate(values.items()):
            if col == self.token_column:
                raise InvalidArgument(f"fencesql: {col!r} is the token column; update sets it")
            sets.append(f"{quote_column(col)} = %(v{i})s, ")
            named[f"v{i}"] = v
        sql = ("UPDATE " + self.t + " SET " + "".join(sets) + self.tokc + " = %(tok)s"
               " WHERE " + self.idc + " = %(id)s AND " + self.tokc + " >= 0 AND " + self.tokc + " <= %(tok)s")
        scope = f"{self.table}/{id}"
        for _ in range(3):
            cur.execute(sql, named)
            if cur.rowcount > 0:
                return
            cur.execute(self.read_sql, (id,))
            row = cur.fetchone()
            if row is None:
                raise RowNotFound(f"fencesql: row not found: {scope}")
            h = int(row[0])
            if h < 0:
                raise CorruptToken(f"fencesql: {scope} holds the token {h}, which no guard writes")
            if h > tok:
                if self.observer is not None:
                    self.observer(Decision(scope, tok, h, False, owner))
                raise StaleToken(scope, tok, h)
        raise FencedError(f"fencesql: update {scope}: row changed concurrently on every attempt")

    def update_lease(self, cur: Any, id: Any, lease: Any, **values: Any) -> None:
        try:
            self.update(cur, id, lease.token, owner=lease_owner(lease), **values)
        except StaleToken as e:
            lost(lease, e)
            raise
