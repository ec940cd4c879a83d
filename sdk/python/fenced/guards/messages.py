"""Messages: the consumer-side fence of docs/guard-spec.md, section 8 (Go: fence/fencemsg).

A queue keeps a message after its producer lost its lease, and redelivery
puts old messages behind new ones; the lease cannot stop them, the consumer
can. The producer stamps each message with its lease; the consumer applies
each message through a guard that keeps the highest token of each scope, so
that the message's effect commits together with its token, and settles the
message by the outcome:

    headers = {}
    stamp(headers, lease, sequence=n)          # producer: Fencing-Scope, Fencing-Token, ...

    consumer = Consumer(PostgresGuard(strict_sequences=True, observer=reporter), conn)
    result = consumer.apply(headers, lambda cur: cur.execute("UPDATE orders SET ..."))
    # result.outcome: APPLIED, STALE, DUPLICATE -> ack; REFUSED -> reject, no requeue;
    # REDELIVER -> requeue (RabbitMQ: fenced.guards.amqp.handle does this)

Headers are any mapping of names (exact in case) to values: str, or bytes
read as UTF-8; a list or tuple is a header given once per item (more than
once is invalid). A value of another type (a number, a table) is refused for
Fencing-Scope, Fencing-Token and Fencing-Sequence and dropped for
Fencing-Owner and Fencing-Token-Signature, never converted. Nothing here
knows a broker: fenced.guards.amqp is the RabbitMQ (pika) adapter; a NATS
JetStream consumer passes msg.headers and acks, terms or naks by the outcome.

Guarantees: a message is applied only if no message (or other write through
the same guard) with a higher token was accepted for its scope, its effect
and the new highest token committing together (PostgresGuard, TxGuard,
AsyncPostgresGuard; MemoryGuard for an effect in this process's memory). A
stale message is not applied and the guard's observer is told. With a
sequence, a message is applied at most once: a redelivered or re-sent copy
is a DUPLICATE.

Non-guarantees: the producer is not told (it learns from its own lease);
messages of an old holder that arrive before any of the new holder's are
applied (they were current then); without a sequence a message is applied
again when the consumer stops between its commit and its ack; a broker that
redelivers a message after later ones of the same token makes a non-strict
guard take it for a duplicate, so use strict_sequences=True or one message
of a scope in flight at a time.
"""

from __future__ import annotations

import enum
import inspect
from typing import Any, Awaitable, Callable, Dict, List, Mapping, MutableMapping, NamedTuple, Optional

from .. import _scope
from ..errors import (BadSignature, Duplicate, FencedError, InvalidArgument, InvalidScope, InvalidSequence, InvalidToken,
                      NoToken, StaleToken, TokenOutOfRange)
from . import lease_owner
from .http import HEADER_OWNER, HEADER_SCOPE, HEADER_SEQUENCE, HEADER_SIGNATURE, HEADER_TOKEN, MAX_SEQUENCE

# Every header a stamp writes, in Go's fencemsg.Names order.
NAMES = (HEADER_SCOPE, HEADER_TOKEN, HEADER_SEQUENCE, HEADER_OWNER, HEADER_SIGNATURE)


class Outcome(enum.StrEnum):
    """What to do with a message after the consumer decided it (Go: fencemsg.Outcome)."""

    APPLIED = "applied"      # the token was current and the effect committed with it: ack
    STALE = "stale"          # a holder whose authority passed to a newer token; nothing applied: ack
    DUPLICATE = "duplicate"  # its sequence was applied already; nothing applied again: ack
    REFUSED = "refused"      # no delivery can make it acceptable: reject without requeue (dead-letter)
    REDELIVER = "redeliver"  # nothing decided or applied: requeue

    @property
    def done(self) -> bool:
        """Whether the message is finished with (every outcome but REDELIVER)."""
        return self is not Outcome.REDELIVER


def _integer(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)  # str(True) is not a number


class Stamp(NamedTuple):
    """What a producer puts in a message's headers: its lease's scope and token, and
    optionally the message's sequence under that token, the owner and the signature."""

    scope: str
    token: int
    sequence: int = 0  # 0: none
    owner: str = ""  # "": none; informational
    signature: str = ""  # "": none

    def headers(self) -> Dict[str, str]:
        """The stamp's headers, after checking that a consumer can read them back: InvalidScope,
        NoToken (token 0), InvalidToken (above 2**64-1), InvalidSequence (outside 0..2**63-1).
        An owner that is not printable (or above 256 bytes) is left out, as a reader drops it."""
        _scope.validate_scope(self.scope)
        if not _integer(self.token) or self.token < 0 or self.token > _scope.MAX_TOKEN:
            raise InvalidToken(f"invalid fencing token: {self.token!r} is not between 1 and {_scope.MAX_TOKEN}")
        if self.token == 0:
            raise NoToken("missing fencing token: token 0 is never issued")
        if not _integer(self.sequence) or self.sequence < 0 or self.sequence > MAX_SEQUENCE:
            raise InvalidSequence(f"invalid fencing sequence: {self.sequence!r} is outside 1..{MAX_SEQUENCE}")
        if not isinstance(self.signature, str):
            raise InvalidArgument(f"fencemsg: signature {self.signature!r} is not a string")
        h = {HEADER_SCOPE: self.scope, HEADER_TOKEN: str(self.token)}
        if self.sequence:
            h[HEADER_SEQUENCE] = str(self.sequence)
        if self.owner and _scope.valid_owner(self.owner):
            h[HEADER_OWNER] = self.owner
        if self.signature:
            h[HEADER_SIGNATURE] = self.signature
        return h

    def write(self, headers: MutableMapping[str, Any]) -> None:
        """Set the stamp's headers in headers, replacing any there, and remove the optional
        ones the stamp does not have. A stamp refused by headers() changes nothing."""
        h = self.headers()
        for name in NAMES:
            if name in h:
                headers[name] = h[name]
            else:
                headers.pop(name, None)

    def guard_kwargs(self) -> Dict[str, Any]:
        """owner, signature and sequence, as every guard's write takes them (guard.do(conn,
        s.scope, s.token, fn, **s.guard_kwargs()), RedisGuard.set(..., **s.guard_kwargs()))."""
        return {"owner": self.owner, "signature": self.signature, "sequence": self.sequence}


def lease_stamp(lease: Any, sequence: int = 0) -> Stamp:
    """The stamp of a message published under lease: its key, token, owner and signature,
    and sequence (the message's number under the token; 0 for none). A message re-sent
    after an unknown outcome must carry the same stamp, sequence included."""
    return Stamp(lease.key, lease.token, sequence, lease_owner(lease), getattr(lease, "signature", "") or "")


def stamp(headers: MutableMapping[str, Any], lease: Any, sequence: int = 0) -> Stamp:
    """Write lease_stamp(lease, sequence) into headers (see Stamp.write) and return it."""
    s = lease_stamp(lease, sequence)
    s.write(headers)
    return s


def wrong_type(name: str, value: object) -> FencedError:
    """The refusal of a fencing header whose value is not text (a number, a table)."""
    kind, what = {HEADER_SCOPE: (InvalidScope, "scope"), HEADER_TOKEN: (InvalidToken, "token"),
                  HEADER_SEQUENCE: (InvalidSequence, "sequence")}.get(name, (InvalidArgument, "header"))
    return kind(f"invalid fencing {what}: header {name} is a {type(value).__name__}, not a string")


def _values(headers: Mapping[str, Any], name: str) -> Optional[List[str]]:
    """The values of name ([] when absent), or None when one is not str or bytes."""
    if name not in headers:
        return []
    v = headers[name]
    out = []
    for x in v if isinstance(v, (list, tuple)) else (v,):
        if isinstance(x, str):
            out.append(x)
        elif isinstance(x, (bytes, bytearray)):
            # Bytes that are not UTF-8 keep their bytes as surrogates: the scope,
            # token and owner checks then refuse them rather than this decode.
            out.append(bytes(x).decode("utf-8", "surrogateescape"))
        else:
            return None
    return out


def _single(headers: Mapping[str, Any], name: str, kind: type[FencedError], what: str) -> Optional[str]:
    vs = _values(headers, name)
    if vs is None:
        raise wrong_type(name, headers[name])
    if len(vs) > 1:
        raise kind(f"invalid fencing {what}: {name} given {len(vs)} times")
    return vs[0] if vs else None


def _quote(v: str) -> str:
    return repr(v[:40]) + ("..." if len(v) > 40 else "")


def read_stamp(headers: Optional[Mapping[str, Any]]) -> Stamp:
    """Read and check a message's stamp (guard-spec section 8, the consumer's step 1).

    Raises, in this order of checking: NoToken (no Fencing-Token, or an
    empty one), InvalidToken (not canonical decimal: a sign, a space or a
    leading zero; 0, above 2**64-1, given more than once, or not text),
    InvalidScope (missing or invalid), InvalidSequence (empty, not canonical
    decimal, 0, above 2**63-1, given more than once, or not text). An invalid owner is dropped, not refused; so is a
    signature given more than once.
    """
    h: Mapping[str, Any] = headers if headers is not None else {}
    tok = _single(h, HEADER_TOKEN, InvalidToken, "token")
    if not tok:
        raise NoToken(f"missing fencing token: no {HEADER_TOKEN} header" if tok is None
                      else f"missing fencing token: {HEADER_TOKEN} is empty")
    token, why = _scope.parse_decimal(tok)
    if why:
        raise InvalidToken(f"invalid fencing token: {_quote(tok)} {why}")
    if token == 0:
        raise InvalidToken("invalid fencing token: 0 is never issued")
    scope = _single(h, HEADER_SCOPE, InvalidScope, "scope")
    if scope is None:
        raise InvalidScope(f"invalid fencing scope: no {HEADER_SCOPE} header")
    _scope.validate_scope(scope)
    sequence = 0
    seq = _single(h, HEADER_SEQUENCE, InvalidSequence, "sequence")
    if seq is not None:
        q, why = _scope.parse_decimal(seq)
        if why:
            raise InvalidSequence(f"invalid fencing sequence: {_quote(seq)} {why}")
        if q == 0 or q > MAX_SEQUENCE:
            raise InvalidSequence(f"invalid fencing sequence: {_quote(seq)} is not between 1 and {MAX_SEQUENCE}")
        sequence = q
    owners = _values(h, HEADER_OWNER)
    owner = owners[0] if owners and len(owners) == 1 and _scope.valid_owner(owners[0]) else ""
    sigs = _values(h, HEADER_SIGNATURE)
    signature = sigs[0] if sigs and len(sigs) == 1 else ""
    return Stamp(scope, token, sequence, owner, signature)


def classify(err: Optional[BaseException]) -> Outcome:
    """The outcome of a message whose guard call raised err (None: it returned).

    StaleToken: STALE; Duplicate: DUPLICATE; NoToken, InvalidToken,
    InvalidScope, InvalidSequence, TokenOutOfRange (a token above what the
    guard stores) and BadSignature: REFUSED; anything else (the effect's
    error, the database's, CommitUnknown, a strict guard's SequenceGap):
    REDELIVER. After CommitUnknown the effect may have committed: with a
    sequence, the redelivered copy is then a DUPLICATE.
    """
    if err is None:
        return Outcome.APPLIED
    if isinstance(err, StaleToken):
        return Outcome.STALE
    if isinstance(err, Duplicate):
        return Outcome.DUPLICATE
    if isinstance(err, (NoToken, InvalidToken, InvalidScope, InvalidSequence, TokenOutOfRange, BadSignature)):
        return Outcome.REFUSED
    return Outcome.REDELIVER


class Result(NamedTuple):
    """A decided message: its outcome, the error behind every outcome but APPLIED, what the
    effect returned (APPLIED), and the stamp (None when it could not be read)."""

    outcome: Outcome
    error: Optional[BaseException] = None
    value: Any = None
    stamp: Optional[Stamp] = None


def decide(headers: Optional[Mapping[str, Any]], call: Callable[[Stamp], Any]) -> Result:
    """Read the stamp (REFUSED if it is not valid), then call(stamp), which makes the guarded
    write: for a guard whose write is not do(), such as RedisGuard:

        decide(headers, lambda s: redis_guard.set(s.scope, s.token, key, value, **s.guard_kwargs()))
    """
    try:
        s = read_stamp(headers)
    except FencedError as e:
        return Result(Outcome.REFUSED, e)
    try:
        value = call(s)
    except Exception as e:
        return Result(classify(e), e, None, s)
    return Result(Outcome.APPLIED, None, value, s)


def _takes_conn(guard: Any) -> bool:
    params = list(inspect.signature(guard.do).parameters)
    return bool(params) and params[0] == "conn"


def _check_guard(guard: Any, conn: Any, want_async: bool) -> None:
    do = getattr(guard, "do", None)
    if not callable(do):
        raise InvalidArgument(f"fencemsg: guard {type(guard).__name__} has no do(); "
                              "for RedisGuard and other guards, use decide(headers, call)")
    name = type(guard).__name__
    if inspect.iscoroutinefunction(do) and not want_async:
        raise InvalidArgument(f"fencemsg: {name}.do is a coroutine function: use AsyncConsumer")
    if want_async and not inspect.iscoroutinefunction(do):
        raise InvalidArgument(f"fencemsg: {name}.do is not a coroutine function: use Consumer")
    if _takes_conn(guard) and conn is None:
        raise InvalidArgument(f"fencemsg: {name} needs conn, the connection its transactions run on")
    if not _takes_conn(guard) and conn is not None:
        raise InvalidArgument(f"fencemsg: {name} takes no connection; leave conn out")


class Consumer:
    """Applies fenced messages through a guard (Go: fencemsg.Consumer).

    guard is a MemoryGuard, a TxGuard (PostgresGuard.tx_guard(connect): a
    connection per message, the effect writes through current_cursor()) or a
    PostgresGuard with conn, the connection whose transactions carry the
    effects (the effect gets the transaction's cursor; one message at a time
    on it). Any guard whose do(scope, token, fn, owner=, signature=,
    sequence=) commits fn's effect with the token works. Its observer is told
    of every stale message (fenced.report.Reporter tells fenced).
    """

    def __init__(self, guard: Any, conn: Any = None) -> None:
        _check_guard(guard, conn, want_async=False)
        self.guard, self.conn = guard, conn

    def apply(self, headers: Optional[Mapping[str, Any]], effect: Callable[..., Any]) -> Result:
        """Read the message's stamp and run effect through the guard with its scope, token,
        sequence, owner and signature: effect runs only if the token is current for the scope,
        and commits with it. effect's signature is the guard's (fn(cur) for PostgresGuard, fn()
        for MemoryGuard and TxGuard); its exceptions are the REDELIVER outcome's error."""
        try:
            s = read_stamp(headers)
        except FencedError as e:
            return Result(Outcome.REFUSED, e)
        return self.apply_stamp(s, effect)

    def apply_stamp(self, s: Stamp, effect: Callable[..., Any]) -> Result:
        """apply for a stamp read already (fenced.guards.amqp reads it with AMQP's types)."""
        args = () if self.conn is None else (self.conn,)
        try:
            value = self.guard.do(*args, s.scope, s.token, effect, **s.guard_kwargs())
        except Exception as e:
            return Result(classify(e), e, None, s)
        return Result(Outcome.APPLIED, None, value, s)


class AsyncConsumer:
    """Consumer for asyncio guards: AsyncPostgresGuard with conn (a psycopg AsyncConnection);
    await apply(headers, effect), effect an async function of the transaction's cursor."""

    def __init__(self, guard: Any, conn: Any = None) -> None:
        _check_guard(guard, conn, want_async=True)
        self.guard, self.conn = guard, conn

    async def apply(self, headers: Optional[Mapping[str, Any]], effect: Callable[..., Awaitable[Any]]) -> Result:
        """Consumer.apply, awaited."""
        try:
            s = read_stamp(headers)
        except FencedError as e:
            return Result(Outcome.REFUSED, e)
        return await self.apply_stamp(s, effect)

    async def apply_stamp(self, s: Stamp, effect: Callable[..., Awaitable[Any]]) -> Result:
        """apply for a stamp read already."""
        args = () if self.conn is None else (self.conn,)
        try:
            value = await self.guard.do(*args, s.scope, s.token, effect, **s.guard_kwargs())
        except Exception as e:
            return Result(classify(e), e, None, s)
        return Result(Outcome.APPLIED, None, value, s)
