"""The client algorithm (docs/client-algorithm.md) on asyncio.

Everything here runs on one event loop: the sync Client runs it on one
background thread of its own, fenced.aio on the caller's loop. Leases are
renewed by timers of that loop, so one client renews any number of leases
without a thread per lease. The wire (HTTP/1.1, chunked bodies, Connect
envelopes, protobuf) is in _wire and _transport; this module decides what
to send, when, and what an answer means for a lease.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import random
import socket
import ssl as _ssl
from dataclasses import dataclass, field
from typing import (Any, AsyncIterator, Awaitable, Callable, Coroutine, Dict, List, Mapping, Optional, Sequence, Set,
                    Tuple, TypeVar, Union)

from . import _wire
from . import errors as E
from ._transport import CLUSTER_ID_HEADER, Body, Endpoint, Pin, frames, log

__all__ = ["CLUSTER_ID_HEADER", "Config", "Endpoint", "Endpoints", "Event", "LeaseCore", "LeaseInfo", "Pin",
           "Session", "info_from"]

SERVICE = "/fenced.v1.LeaseService/"
REJECTIONS = "/fenced.v1.RejectionService/"

DEFAULT_ENDPOINT = "http://127.0.0.1:7420"
DEFAULT_CLOCK_DRIFT = 0.001
DEFAULT_DEADLINE_MARGIN = 0.010

# Calls that may be sent twice with the effect of once.
IDEMPOTENT = frozenset(("Renew", "Get", "List", "ListRejections"))

T = TypeVar("T")
Message = Dict[str, Any]
# observe(method, request) -> done(status, data, exc): a test's or a harness's view of every attempt.
Observer = Callable[[str, Mapping[str, Any]], Callable[[int, bytes, Optional[BaseException]], None]]

_int = _wire._int


@dataclass
class Config:
    """Client settings; every field has the Go client's default (docs/client-algorithm.md, section 2)."""

    endpoints: Union[str, List[str]] = field(default_factory=lambda: [DEFAULT_ENDPOINT])
    ttl: float = 10.0
    owner: str = ""
    renew_interval: float = 0.0
    request_timeout: float = 2.0
    failover_timeout: float = 5.0
    clock_drift: float = DEFAULT_CLOCK_DRIFT
    deadline_margin: float = DEFAULT_DEADLINE_MARGIN
    token: str = ""  # bearer token
    ssl: Optional[_ssl.SSLContext] = None
    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""
    server_name: str = ""
    cluster_id: str = ""  # pin this cluster up front; default: the first answer's

    def normalized(self) -> "Config":
        """A copy with the defaults filled in, validated: InvalidArgument names the bad setting."""
        c = copy.copy(self)
        eps = c.endpoints.split(",") if isinstance(c.endpoints, str) else list(c.endpoints)
        out: List[str] = []
        seen: Set[str] = set()
        for i, e in enumerate(eps):
            e = e.strip().rstrip("/")
            if not e:
                raise E.InvalidArgument(f"client config: endpoint {i} is empty")
            if "://" not in e:
                e = "http://" + e
            if e in seen:
                raise E.InvalidArgument(f"client config: endpoint {e} is listed twice")
            seen.add(e)
            out.append(e)
        if not out:
            out = [DEFAULT_ENDPOINT]
        c.endpoints = out
        c.cluster_id = c.cluster_id.lower()
        if not c.owner:
            c.owner = f"{socket.gethostname()}/{os.getpid()}"
        bad = None
        if c.ttl < 0.001:
            bad = f"ttl {c.ttl}s is below 1ms"
        elif c.renew_interval < 0 or c.renew_interval >= c.ttl:
            bad = f"renew_interval {c.renew_interval}s must be positive and below ttl {c.ttl}s"
        elif c.request_timeout <= 0:
            bad = f"request_timeout {c.request_timeout}s must be positive"
        elif c.failover_timeout < 0:
            bad = f"failover_timeout {c.failover_timeout}s is negative"
        elif not 0 <= c.clock_drift < 0.5:
            bad = f"clock_drift {c.clock_drift} must be at least 0 and below 0.5"
        elif c.deadline_margin < 0:
            bad = f"deadline_margin {c.deadline_margin}s must not be negative"
        elif c.window(c.ttl) <= c.ttl / 3:
            bad = f"ttl {c.ttl}s less the drift margins leaves {c.window(c.ttl):.3f}s, not more than ttl/3"
        elif c.cluster_id.strip("0123456789abcdef"):
            bad = f"cluster_id {c.cluster_id!r} is not a hex string"
        elif any(ch in c.token for ch in "\r\n\0"):
            bad = "token holds a line break or NUL"
        elif bool(c.cert_file) != bool(c.key_file):
            bad = "cert_file and key_file go together"
        if bad:
            raise E.InvalidArgument("client config: " + bad)
        if c.ssl is None and any(e.startswith("https://") for e in out):
            ctx = _ssl.create_default_context(cafile=c.ca_file or None)
            if c.cert_file:
                ctx.load_cert_chain(c.cert_file, c.key_file)
            c.ssl = ctx
        return c

    def window(self, ttl: float) -> float:
        """How long after a successful request was sent the lease is certainly held."""
        return ttl - ttl * self.clock_drift - self.deadline_margin

    def interval(self, ttl: float) -> float:
        if self.renew_interval > 0:
            return min(ttl / 3, self.renew_interval)
        return ttl / 3


# ---------------------------------------------------------------- values


@dataclass(frozen=True)
class LeaseInfo:
    """A lease as the server reported it; ``lease_id`` is empty outside Acquire and Renew."""

    key: str
    owner: str
    token: int
    ttl: float
    remaining: float
    lease_id: str = ""
    signature: str = ""


def info_from(m: Mapping[str, Any], signature: str = "") -> LeaseInfo:
    """A LeaseInfo from a message's lease (JSON names, int64s as strings)."""
    return LeaseInfo(key=str(m.get("key") or ""), owner=str(m.get("owner") or ""), token=_int(m.get("token")),
                     ttl=_int(m.get("ttlMs")) / 1000, remaining=_int(m.get("remainingMs")) / 1000,
                     lease_id=str(m.get("leaseId") or ""), signature=signature or "")


@dataclass(frozen=True)
class Event:
    """One transition seen by watch: type is ACQUIRED, RELEASED, EXPIRED, RESYNC or REJECTED."""

    type: str
    lease: Optional[LeaseInfo]
    revision: int
    rejection: Optional[Dict[str, Any]] = None


class Endpoints:
    """Failover between nodes on unavailable and transport errors (docs/client-algorithm.md, section 7)."""

    def __init__(self, cfg: Config) -> None:
        self.pin = Pin(cfg.cluster_id)
        self.eps = [Endpoint(u, cfg, self.pin) for u in cfg.endpoints]
        self.current = 0
        self.timeout = cfg.failover_timeout
        self.searching = False
        self.started = False
        self._tasks: Set["asyncio.Future[None]"] = set()

    def failed_over(self, i: int) -> None:
        if self.current == i:
            self.current = (i + 1) % len(self.eps)
            self.look_for_leader()

    def look_for_leader(self) -> None:
        if len(self.eps) < 2 or self.searching:
            return
        self.searching = True

        async def search() -> None:
            try:
                tasks = {asyncio.ensure_future(ep.leads()): i for i, ep in enumerate(self.eps)}
                for fut in asyncio.as_completed(list(tasks), timeout=2.0):
                    try:
                        if await fut:
                            for t, i in tasks.items():
                                if t.done() and not t.cancelled() and t.result():
                                    self.current = i
                            return
                    except asyncio.TimeoutError:
                        return
            finally:
                self.searching = False

        t = asyncio.ensure_future(search())
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    async def do(self, call: Callable[[Endpoint], Awaitable[T]], deadline: Optional[float]) -> T:
        """Run call(endpoint) until one serves it; call's error is raised as is."""
        loop = asyncio.get_running_loop()
        if len(self.eps) == 1:
            return await call(self.eps[0])
        if not self.started:
            self.started = True
            self.look_for_leader()
        start, pause, tried = loop.time(), 0.05, 0
        while True:
            i = self.current % len(self.eps)
            try:
                return await call(self.eps[i])
            except E.Timeout:
                self.failed_over(i)
                raise
            except E.Unavailable as e:
                self.failed_over(i)
                tried += 1
                if tried % len(self.eps):
                    continue
                now = loop.time()
                if now - start + pause > self.timeout or (deadline is not None and now + pause >= deadline):
                    raise e
                await asyncio.sleep(pause)
                pause = min(2 * pause, 1.0)


# ---------------------------------------------------------------- session


class LeaseCore:
    """A held lease on a Session's loop: deadline, renewal timer, loss."""

    def __init__(self, s: "Session", info: LeaseInfo, interval: float, window: float) -> None:
        self.s, self.info = s, info
        self.interval, self.window = interval, window
        self.signature = info.signature
        self.deadline = 0.0  # loop.time(), i.e. time.monotonic()
        self.state = "held"  # held, lost, released
        self.cause: Optional[E.FencedError] = None
        self.expiry: Optional[asyncio.TimerHandle] = None
        self.renewal: Optional[asyncio.TimerHandle] = None
        self.on_end: List[Callable[[E.FencedError], None]] = []  # called on the loop with the cause, once

    def start(self, sent: float) -> None:
        loop = self.s.loop
        self.deadline = sent + self.window
        self.expiry = loop.call_at(self.deadline, self._deadline_passed)
        self.renewal = loop.call_later(self._jittered(), self._renew_due)
        self.s.leases.add(self)

    def _jittered(self) -> float:
        return self.interval - random.uniform(0, self.interval / 10)

    def _deadline_passed(self) -> None:
        if self.s.loop.time() < self.deadline:  # moved by a renewal since
            self.expiry = self.s.loop.call_at(self.deadline, self._deadline_passed)
            return
        self.lose("local deadline passed without a successful renewal")

    def _halt(self) -> bool:
        if self.state != "held":
            return False
        for h in (self.expiry, self.renewal):
            if h is not None:
                h.cancel()
        self.s.leases.discard(self)
        return True

    def _end(self, state: str, cause: E.FencedError) -> None:
        self.state, self.cause = state, cause
        for fn in self.on_end:
            try:
                fn(cause)
            except Exception:  # a callback's failure must not stop the others
                pass

    def lose(self, why: object, release: bool = True) -> None:
        """Lose the lease once: stop renewing, tell the callbacks, release in the background."""
        if not self._halt():
            return
        i = self.info
        self._end("lost", E.LeaseLost(f"lease lost: {i.key!r} token {i.token}: {why}"))
        if release:
            self.s.spawn(self.s.release_quietly(i.key, i.lease_id))

    async def release(self) -> None:
        halted = self._halt()
        if halted:
            self._end("released", E.LeaseReleased(f"lease released: {self.info.key!r} token {self.info.token}"))
        await self.s.release(self.info.key, self.info.lease_id, self.s.cfg.request_timeout)

    async def renew_once(self) -> float:
        """Send one renewal; return the time it proves the lease from (its send time)."""
        sent = self.s.loop.time()
        m = await self.s.renew(self.info.key, self.info.lease_id, self.s.cfg.request_timeout)
        sig = m.get("tokenSignature")
        if isinstance(sig, str) and sig:
            self.signature = sig
        return self.s.proof_time(sent)

    def _renew_due(self) -> None:
        self.renewal = None
        self.s.spawn(self._renew())

    async def _renew(self) -> None:
        try:
            sent = await self.renew_once()
        except E.NotHeld as e:
            self.lose(f"renewal refused: {e}")
            return
        except asyncio.CancelledError:
            raise
        except Exception:
            if self.state == "held":
                self.renewal = self.s.loop.call_later(min(self.interval / 4, 0.25), self._renew_due)
            return
        if self.state != "held":
            return
        if self.s.loop.time() >= self.deadline:
            # Answered in time perhaps, but applied after the deadline (the
            # loop was late and the expiry timer has not run yet): the lease
            # is lost, and a lost lease never comes back (client-algorithm 1.2).
            self.lose("local deadline passed before the renewal's answer was applied")
            return
        d = sent + self.window
        if d > self.deadline:
            self.deadline = d  # the expiry timer re-arms itself when it fires early
        self.renewal = self.s.loop.call_later(self._jittered(), self._renew_due)


class Session:
    """The client's calls and leases, on one event loop."""

    def __init__(self, cfg: Config, loop: asyncio.AbstractEventLoop) -> None:
        self.cfg = cfg.normalized()
        self.loop = loop
        self.eps = Endpoints(self.cfg)
        self.leases: Set[LeaseCore] = set()
        self.tasks: Set["asyncio.Task[None]"] = set()
        self.observe: Optional[Observer] = None

    def proof_time(self, sent: float) -> float:
        """The time an answered Acquire or Renew proves the lease from: its send
        time (docs/client-algorithm.md, section 3). A seam for the torture
        harness, whose mutant answers the time the answer arrived instead."""
        return sent

    def spawn(self, coro: Coroutine[Any, Any, None]) -> "asyncio.Task[None]":
        t = self.loop.create_task(coro)
        self.tasks.add(t)
        t.add_done_callback(self.tasks.discard)
        return t

    async def _unary(self, ep: Endpoint, path: str, msg: Mapping[str, Any], timeout: float,
                     method: str = "") -> Message:
        body = json.dumps(msg).encode()
        done = self.observe(method, msg) if self.observe and method else None
        try:
            async with asyncio.timeout(timeout):
                status, data = await ep.post(path, body, timeout, method in IDEMPOTENT)
        except TimeoutError as e:
            if done:
                done(0, b"", e)
            raise E.Timeout(f"{method or path}: no answer within {timeout:.3f}s") from None
        except BaseException as e:
            if done:
                done(0, b"", e)
            raise
        if done:
            done(status, data, None)
        if status == 200:
            return _wire.decode_message(data)
        raise _wire.connect_error(status, data)

    async def call(self, method: str, msg: Mapping[str, Any], timeout: float, service: str = SERVICE,
                   unanswered: Optional[List[E.Unavailable]] = None) -> Message:
        """One call, failed over between endpoints; the attempts that may have
        arrived unanswered are appended to unanswered, if given."""
        deadline = self.loop.time() + timeout

        async def one(ep: Endpoint) -> Message:
            left = deadline - self.loop.time()
            if left <= 0:
                raise E.Timeout(f"{method}: deadline passed")
            try:
                return await self._unary(ep, service + method, msg, left, method)
            except E.Unavailable as e:
                if unanswered is not None and e.may_have_arrived:
                    unanswered.append(e)
                raise

        return await self.eps.do(one, deadline)

    # -- lease API

    async def acquire(self, key: str, ttl: Optional[float], wait: float, owner: str,
                      timeout: Optional[float]) -> LeaseCore:
        ttl_ms = str(int(round((self.cfg.ttl if ttl is None else ttl) * 1000)))
        owner = owner or self.cfg.owner
        loop = self.loop
        start = loop.time()
        if timeout is None:
            timeout = wait + self.cfg.request_timeout
        deadline = start + timeout
        sent = start
        unanswered: List[E.Unavailable] = []

        async def one(ep: Endpoint) -> Message:
            nonlocal sent
            left = deadline - loop.time()
            if left <= 0:
                raise E.Timeout(f"acquire {key!r}: deadline passed")
            sent = loop.time()
            msg = {"key": key, "owner": owner, "ttlMs": ttl_ms,
                   "waitMs": str(max(0, int((wait - (sent - start)) * 1000)))}
            try:
                return await self._unary(ep, SERVICE + "Acquire", msg, left, "Acquire")
            except E.Unavailable as e:
                if not unanswered and e.may_have_arrived:
                    unanswered.append(e)
                raise

        try:
            m = await self.eps.do(one, deadline)
        except E.Held as h:
            if unanswered and h.owner == owner:
                raise E.AcquireUncertain(h.key, h.owner, h.remaining, unanswered[0]) from h
            if loop.time() >= deadline:
                raise E.Timeout(f"acquire {key!r}: deadline passed (the key was still held: {h})") from h
            raise
        sent = self.proof_time(sent)
        sig = m.get("tokenSignature")
        info = info_from(m.get("lease") or {}, sig if isinstance(sig, str) else "")
        interval, window = self.cfg.interval(info.ttl), self.cfg.window(info.ttl)
        lease = LeaseCore(self, info, interval, window)
        if window <= interval:
            lease.lose("TTL too short for the deadline margin")
            raise E.InvalidArgument(f"acquire {key!r}: TTL {info.ttl}s too short for the deadline margin")
        late = loop.time() - sent
        if late > (window - interval) / 2:
            try:
                sent = await lease.renew_once()
            except Exception as e:
                lease.lose(f"renewal after a grant that took {late:.3f}s: {e}")
                assert lease.cause is not None
                raise lease.cause from e
        lease.start(sent)
        return lease

    async def renew(self, key: str, lease_id: str, timeout: float) -> Message:
        return await self.call("Renew", {"key": key, "leaseId": lease_id}, timeout)

    async def release(self, key: str, lease_id: str, timeout: float) -> None:
        """Release; NotHeld when a node answered that the lease had already ended.

        An attempt that went unanswered may have released the lease before its
        answer was lost (the node died, or stopped leading). If the retry at the
        next endpoint then answers not_found, the lease was released by that
        attempt or expired: it is gone either way, and release returns
        normally (docs/client-algorithm.md, section 6).
        """
        unanswered: List[E.Unavailable] = []
        try:
            await self.call("Release", {"key": key, "leaseId": lease_id}, timeout, unanswered=unanswered)
        except E.NotHeld:
            if not unanswered:
                raise

    async def release_quietly(self, key: str, lease_id: str) -> None:
        try:
            await self.release(key, lease_id, self.cfg.request_timeout)
        except Exception:
            pass

    async def get(self, key: str, timeout: float) -> Tuple[Optional[LeaseInfo], int, int]:
        m = await self.call("Get", {"key": key}, timeout)
        lease = info_from(m["lease"]) if m.get("lease") else None
        return lease, _int(m.get("lastToken")), _int(m.get("revision"))

    async def list(self, prefix: str, limit: int, timeout: float) -> Tuple[List[LeaseInfo], int]:
        m = await self.call("List", {"prefix": prefix, "limit": limit}, timeout)
        return [info_from(x) for x in m.get("leases") or []], _int(m.get("revision"))

    async def report_rejections(self, rejections: Sequence[Mapping[str, Any]], timeout: float) -> int:
        m = await self.call("ReportRejections", {"rejections": list(rejections)}, timeout, REJECTIONS)
        return _int(m.get("recorded"))

    async def list_rejections(self, prefix: str, limit: int, timeout: float) -> Tuple[List[Dict[str, Any]], int]:
        m = await self.call("ListRejections", {"prefix": prefix, "limit": limit}, timeout, REJECTIONS)
        return m.get("rejections") or [], _int(m.get("total"))

    async def watch(self, prefix: str, after: int = 0, rejections: bool = False) -> AsyncIterator[Event]:
        """Yield events in order; see docs/client-algorithm.md, section 10."""
        broken = 0
        last_rev = at_last = skip = 0
        n = len(self.eps.eps)
        while True:
            opened = {"i": 0}

            async def open_one(ep: Endpoint) -> Tuple[asyncio.StreamWriter, Body]:
                opened["i"] = self.eps.eps.index(ep)
                return await ep.stream(SERVICE + "Watch", {"prefix": prefix, "afterRevision": str(after),
                                                           "rejections": rejections})

            w, body = await self.eps.do(open_one, None)
            err: Optional[BaseException] = None
            stream = frames(body)
            try:
                if broken and after == 0:
                    yield Event("RESYNC", None, 0)
                try:
                    async for flags, payload in stream:
                        msg = _wire.decode_message(payload)
                        if flags & _wire.END_STREAM:
                            if isinstance(msg.get("error"), dict):
                                err = _wire.error_from_body(msg["error"])
                            break
                        ev = event_from(msg)
                        if ev.type != "RESYNC" and ev.revision > 0:
                            if ev.revision == last_rev and skip > 0:
                                skip -= 1
                                continue
                            if ev.revision != last_rev:
                                last_rev, at_last = ev.revision, 0
                            at_last += 1
                            after, broken, skip = last_rev - 1, 0, 0
                        yield ev
                except E.Unavailable as e:
                    err = e
            finally:
                w.close()
                await stream.aclose()  # not left to the garbage collector
            broken += 1
            if n == 1 and err is None:
                return
            if n == 1 or broken > 2 * n:
                raise err or E.Unavailable("stream ended by the server")
            self.eps.failed_over(opened["i"])
            if last_rev:
                skip = at_last

    async def close(self, release: bool = True) -> None:
        """Lose every lease (releasing them unless release is False) and close connections."""
        held = list(self.leases)
        for lease in held:
            lease.lose("client closed", release=False)
        if release and held:
            await asyncio.gather(*(self.release_quietly(lc.info.key, lc.info.lease_id) for lc in held))
        for t in list(self.tasks):
            t.cancel()
        for ep in self.eps.eps:
            ep.close()


def event_from(msg: Mapping[str, Any]) -> Event:
    """The Event of a Watch message ({"event": {type, lease, revision, rejection}})."""
    ev = msg.get("event")
    ev = ev if isinstance(ev, dict) else {}
    lease = ev.get("lease")
    rejection = ev.get("rejection")
    return Event(str(ev.get("type") or ""), info_from(lease) if isinstance(lease, dict) else None,
                 _int(ev.get("revision")), rejection if isinstance(rejection, dict) else None)
