"""Guards: the resource side, sharing the Go guards' tables, scripts and headers exactly.

- fenced.guards.postgres: PostgresGuard (the fence_scopes table of Go's
  fencesql, psycopg 3 or psycopg2) and RowFence;
- fenced.guards.postgres_async: AsyncPostgresGuard, the same on psycopg 3's
  AsyncConnection;
- fenced.guards.redis: RedisGuard (the Lua script and keys of fenceredis);
- fenced.guards.http: headers for requests/httpx/urllib, the 409
  problem+json to StaleToken mapping, WSGI and ASGI middleware;
- fenced.guards.memory: MemoryGuard, in-process;
- fenced.guards.messages: the consumer-side fence for queued messages
  (stamps, Consumer, outcomes), through one of the guards above;
- fenced.guards.amqp: its RabbitMQ adapter for pika.

Every guard makes the one decision of docs/guard-spec.md: a token is
accepted iff it is at least the highest accepted for its scope, and then
becomes the highest, atomically with the write. Each guard module imports
only the driver it guards.

A guard's observer, if given, is called with a Decision after every
decision is final (an acceptance after commit), outside any lock; it must
not block (fenced.report.Reporter is one).
"""

from typing import Any, NamedTuple


class Decision(NamedTuple):
    scope: str
    presented: int
    highest: int  # the highest before this check
    accepted: bool
    owner: str = ""
    duplicate: bool = False  # refused as a duplicate sequence, not as stale


def lease_owner(lease: Any) -> str:
    from .._scope import valid_owner

    owner = getattr(lease, "owner", "") or ""
    return owner if valid_owner(owner) else ""


def lost(lease: Any, err: BaseException) -> None:
    """Tell a lease that its token was refused as stale (invariant I7)."""
    report = getattr(lease, "report_lost", None)
    if report is not None:
        report(err)
