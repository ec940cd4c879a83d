"""The client algorithm (docs/client-algorithm.md) on asyncio.

Everything here runs on one event loop: the sync Client runs it on one
background thread of its own, fenced.aio on the caller's loop. Leases are
renewed by timers of that loop, so one client renews any number of leases
without a thread per lease. HTTP/1.1 is spoken directly over asyncio
streams (Connect's JSON protocol is plain POSTs; Watch is a chunked stream
of enveloped messages).
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import random
import socket
import ssl as _ssl
import struct
import urllib.parse
from dataclasses import dataclass, field
from typing import AsyncIterator, Callable, Optional

from . import errors as E

SERVICE = "/fenced.v1.LeaseService/"
REJECTIONS = "/fenced.v1.RejectionService/"

DEFAULT_ENDPOINT = "http://127.0.0.1:7420"
DEFAULT_CLOCK_DRIFT = 0.001
DEFAULT_DEADLINE_MARGIN = 0.010

# Every node names its cluster in this response header (docs/protocol.md).
CLUSTER_ID_HEADER = "fenced-cluster-id"

log = logging.getLogger("fenced")

# Calls that may be sent twice with the effect of once.
IDEMPOTENT = frozenset(("Renew", "Get", "List", "ListRejections"))

# The mutant the torture harness must catch: the local deadline counted
# from when the answer arrived instead of when the request was sent.
MUTANT_ENV = "FENCED_TORTURE_MUTANT"


@dataclass
class Config:
    """Client settings; every field has the Go client's default (docs/client-algorithm.md, section 2)."""

    endpoints: list = field(default_factory=lambda: [DEFAULT_ENDPOINT])
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
        import copy

        c = copy.copy(self)
        eps = c.endpoints
        if isinstance(eps, str):
            eps = [e for e in eps.split(",")]
        out, seen = [], set()
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


def _int(v) -> int:
    return int(v) if v not in (None, "") else 0


def info_from(m: dict, signature: str = "") -> LeaseInfo:
    return LeaseInfo(key=m.get("key", ""), owner=m.get("owner", ""), token=_int(m.get("token")),
                     ttl=_int(m.get("ttlMs")) / 1000, remaining=_int(m.get("remainingMs")) / 1000,
                     lease_id=m.get("leaseId", "") or "", signature=signature or "")


@dataclass(frozen=True)
class Event:
    """One transition seen by watch: type is ACQUIRED, RELEASED, EXPIRED, RESYNC or REJECTED."""

    type: str
    lease: Optional[LeaseInfo]
    revision: int
    rejection: Optional[dict] = None


# ---------------------------------------------------------------- wire


def _varint(b: bytes, i: int):
    n = shift = 0
    while True:
        c = b[i]
        i += 1
        n |= (c & 0x7F) << shift
        if c < 0x80:
            return n, i
        shift += 7


def decode_lease_held(value: str) -> dict:
    """Decode the protobuf of a fenced.v1.LeaseHeld detail (unpadded base64)."""
    raw = base64.b64decode(value + "=" * (-len(value) % 4))
    out = {"key": "", "owner": "", "token": 0, "remainingMs": 0}
    names = {1: "key", 2: "owner", 3: "token", 4: "remainingMs"}
    i = 0
    while i < len(raw):
        tag, i = _varint(raw, i)
        num, wt = tag >> 3, tag & 7
        if wt == 0:
            v, i = _varint(raw, i)
            if num == 4 and v >= 1 << 63:
                v -= 1 << 64
        elif wt == 2:
            n, i = _varint(raw, i)
            v = raw[i:i + n].decode("utf-8", "replace")
            i += n
        elif wt == 1:
            v, i = None, i + 8
        elif wt == 5:
            v, i = None, i + 4
        else:
            raise ValueError(f"wire type {wt}")
        if num in names and v is not None:
            out[names[num]] = v
    return out


_HTTP_TO_CODE = {400: "internal", 401: "unauthenticated", 403: "permission_denied", 404: "unimplemented",
                 429: "unavailable", 502: "unavailable", 503: "unavailable", 504: "unavailable"}


def connect_error(status: int, data: bytes) -> E.FencedError:
    """The exception for a failed unary call (or an end-of-stream error)."""
    try:
        body = json.loads(data) if data else {}
        code = body.get("code", "") if isinstance(body, dict) else ""
    except ValueError:
        body, code = {}, ""
    if not code:
        code = _HTTP_TO_CODE.get(status, "unknown")
        return E.from_code(code, f"HTTP {status}: {data[:200].decode('utf-8', 'replace')}")
    return error_from_body(body)


def error_from_body(body: dict) -> E.FencedError:
    code, msg = body.get("code", "unknown"), body.get("message", "")
    if code == "failed_precondition":
        for d in body.get("details") or []:
            if d.get("type") != "fenced.v1.LeaseHeld":
                continue
            try:
                h = decode_lease_held(d.get("value", ""))
            except (ValueError, IndexError):
                h = d.get("debug") or {}
            return E.Held(h.get("key", ""), h.get("owner", ""), _int(h.get("token")),
                          _int(h.get("remainingMs")) / 1000, msg)
    return E.from_code(code, msg)


class _ChunkedReader:
    """Reads a chunked HTTP/1.1 body (or an unframed one up to EOF) piece by piece."""

    def __init__(self, reader: asyncio.StreamReader, chunked: bool, length: Optional[int]):
        self.r, self.chunked, self.left = reader, chunked, length
        self.buf = bytearray()
        self.done = False

    async def _more(self) -> bool:
        if self.done:
            return False
        if self.chunked:
            line = await self.r.readuntil(b"\r\n")
            n = int(line.split(b";")[0].strip(), 16)
            if n == 0:
                await self.r.readuntil(b"\r\n")  # no trailers from Go servers
                self.done = True
                return False
            self.buf += await self.r.readexactly(n)
            await self.r.readexactly(2)
            return True
        if self.left is not None:
            if self.left == 0:
                self.done = True
                return False
            piece = await self.r.read(min(self.left, 65536))
            if not piece:
                raise asyncio.IncompleteReadError(bytes(self.buf), None)
            self.left -= len(piece)
        else:
            piece = await self.r.read(65536)
            if not piece:
                self.done = True
                return False
        self.buf += piece
        return True

    async def readexactly(self, n: int) -> Optional[bytes]:
        """n bytes, or None at a clean end of the body before any of them."""
        while len(self.buf) < n:
            if not await self._more():
                if not self.buf:
                    return None
                raise asyncio.IncompleteReadError(bytes(self.buf), n)
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    async def readall(self) -> bytes:
        while await self._more():
            pass
        out = bytes(self.buf)
        self.buf.clear()
        return out


class Pin:
    """The cluster a client is pinned to (docs/client-algorithm.md, section 7).

    The first cluster ID an answer names (or Config.cluster_id) is pinned;
    an answer naming another is never used: check raises ClusterMismatch, an
    Unavailable, so the call fails over as after a connection failure. Each
    such endpoint is logged once, at error level. An answer without the
    header (an older server) is accepted.
    """

    def __init__(self, cluster_id: str = ""):
        self.id = cluster_id
        self.reported: set = set()

    def check(self, url: str, got: str):
        """Pin got unless a cluster is pinned; raise ClusterMismatch if got names another."""
        if got and not self.id:
            self.id = got
        self.foreign(url, got)

    def foreign(self, url: str, got: str):
        """Raise ClusterMismatch if got names another cluster than the pinned one; never pins."""
        if not got or not self.id or got == self.id:
            return
        err = E.ClusterMismatch(url, self.id, got)
        if url not in self.reported:
            self.reported.add(url)
            log.error("fenced client: an endpoint belongs to another cluster; its answers are not used: %s", err)
        raise err


class Endpoint:
    """One node: a pool of keep-alive HTTP/1.1 connections."""

    IDLE_FOR = 30.0  # well below the server's idle timeout (2 minutes)

    def __init__(self, url: str, cfg: Config, pin: Optional[Pin] = None):
        self.url = url
        self.pin = pin or Pin(cfg.cluster_id)
        u = urllib.parse.urlsplit(url)
        self.tls = u.scheme == "https"
        self.host = u.hostname or "127.0.0.1"
        self.port = u.port or (443 if self.tls else 80)
        self.base = u.path.rstrip("/")
        self.hostport = u.netloc
        self.ssl = cfg.ssl if self.tls else None
        self.server_name = (cfg.server_name or self.host) if self.tls else None
        self.auth = ("Bearer " + cfg.token) if cfg.token else ""
        self.idle: list = []

    async def _open(self):
        try:
            return await asyncio.open_connection(self.host, self.port, ssl=self.ssl, server_hostname=self.server_name)
        except ConnectionRefusedError as e:
            raise E.Unavailable(f"{self.url}: connection refused", may_have_arrived=False) from e
        except _ssl.SSLError as e:
            raise E.Unavailable(f"{self.url}: TLS: {e}", may_have_arrived=False) from e
        except OSError as e:
            raise E.Unavailable(f"{self.url}: {e}", may_have_arrived=False) from e

    def _take(self):
        loop = asyncio.get_running_loop()
        while self.idle:
            r, w, t = self.idle.pop()
            if loop.time() - t < self.IDLE_FOR and not r.at_eof() and not w.is_closing():
                return r, w
            w.close()
        return None

    def close(self):
        for _, w, _ in self.idle:
            w.close()
        self.idle.clear()

    def _head(self, path: str, ctype: str, n: int, timeout: Optional[float]) -> bytes:
        h = [f"POST {self.base}{path} HTTP/1.1", f"Host: {self.hostport}", f"Content-Type: {ctype}",
             f"Content-Length: {n}", "Connect-Protocol-Version: 1", "User-Agent: fenced-python/0.1"]
        if timeout is not None:
            h.append(f"Connect-Timeout-Ms: {max(1, int(timeout * 1000))}")
        if self.auth:
            h.append("Authorization: " + self.auth)
        return ("\r\n".join(h) + "\r\n\r\n").encode("latin-1")

    @staticmethod
    async def _read_head(r: asyncio.StreamReader):
        head = await r.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        status = int(parts[1])
        hdrs = {}
        for line in lines[1:]:
            if ":" in line:
                k, v = line.split(":", 1)
                hdrs[k.strip().lower()] = v.strip()
        return status, hdrs

    @staticmethod
    def _body(r, hdrs) -> _ChunkedReader:
        chunked = "chunked" in hdrs.get("transfer-encoding", "").lower()
        length = None if chunked or "content-length" not in hdrs else int(hdrs["content-length"])
        return _ChunkedReader(r, chunked, length)

    async def post(self, path: str, body: bytes, timeout: float, idempotent: bool):
        """One unary POST; returns (status, body). Raises Unavailable or Timeout.

        A kept-alive connection may turn out closed by the server only once
        the request is written; an idempotent call then goes again on a new
        connection, as net/http does. Any other call fails with Unavailable:
        the request may have arrived (an Acquire granted, a Release applied)
        and sending it again would hide that.
        """
        loop = asyncio.get_running_loop()
        for attempt in (0, 1):
            conn = self._take() if attempt == 0 else None
            reused = conn is not None
            if conn is None:
                try:
                    conn = await asyncio.wait_for(self._open(), timeout)
                except E.Unavailable as e:
                    if attempt:  # the first attempt, on a reused connection, may have arrived
                        raise E.Unavailable(str(e)) from e
                    raise
            r, w = conn
            got = False
            try:
                w.write(self._head(path, "application/json", len(body), timeout) + body)
                await w.drain()
                status, hdrs = await self._read_head(r)
                got = True
                data = await self._body(r, hdrs).readall()
            except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError, ValueError) as e:
                w.close()
                if reused:
                    self.close()  # the node likely went away: its other idle connections are dead too
                if reused and not got and idempotent:
                    continue
                raise E.Unavailable(f"{self.url}: {type(e).__name__}: {e}") from e
            except BaseException:
                w.close()
                raise
            if hdrs.get("connection", "").lower() == "close":
                w.close()
            else:
                self.idle.append((r, w, loop.time()))
            self.pin.check(self.url, hdrs.get(CLUSTER_ID_HEADER, ""))
            return status, data
        raise AssertionError("unreachable")

    async def stream(self, path: str, msg: dict):
        """Open a server stream; returns (writer, reader of the body)."""
        r, w = await self._open()
        payload = json.dumps(msg).encode()
        env = b"\x00" + struct.pack(">I", len(payload)) + payload
        try:
            w.write(self._head(path, "application/connect+json", len(env), None) + env)
            await w.drain()
            status, hdrs = await self._read_head(r)
            try:
                self.pin.check(self.url, hdrs.get(CLUSTER_ID_HEADER, ""))
            except E.ClusterMismatch:
                w.close()
                raise
            body = self._body(r, hdrs)
            if status != 200:
                data = await body.readall()
                w.close()
                raise connect_error(status, data)
        except (ConnectionError, asyncio.IncompleteReadError, OSError) as e:
            w.close()
            raise E.Unavailable(f"{self.url}: {type(e).__name__}: {e}") from e
        return w, body

    async def leads(self) -> bool:
        try:
            r, w = await self._open()
        except E.FencedError:
            return False
        try:
            req = f"GET {self.base}/v1/role HTTP/1.1\r\nHost: {self.hostport}\r\nConnection: close\r\n"
            if self.auth:
                req += "Authorization: " + self.auth + "\r\n"
            w.write((req + "\r\n").encode())
            await w.drain()
            status, hdrs = await self._read_head(r)
            self.pin.foreign(self.url, hdrs.get(CLUSTER_ID_HEADER, ""))
            data = await self._body(r, hdrs).readall()
            role = json.loads(data)
            return status == 200 and role.get("role") == "leader" and bool(role.get("ready"))
        except Exception:
            return False
        finally:
            w.close()


class Endpoints:
    """Failover between nodes on unavailable and transport errors (docs/client-algorithm.md, section 7)."""

    def __init__(self, cfg: Config):
        self.pin = Pin(cfg.cluster_id)
        self.eps = [Endpoint(u, cfg, self.pin) for u in cfg.endpoints]
        self.current = 0
        self.timeout = cfg.failover_timeout
        self.searching = False
        self.started = False
        self._tasks: set = set()

    def failed_over(self, i: int):
        if self.current == i:
            self.current = (i + 1) % len(self.eps)
            self.look_for_leader()

    def look_for_leader(self):
        if len(self.eps) < 2 or self.searching:
            return
        self.searching = True

        async def search():
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

    async def do(self, call: Callable, deadline: Optional[float]):
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

    def __init__(self, s: "Session", info: LeaseInfo, interval: float, window: float):
        self.s, self.info = s, info
        self.interval, self.window = interval, window
        self.signature = info.signature
        self.deadline = 0.0  # loop.time(), i.e. time.monotonic()
        self.state = "held"  # held, lost, released
        self.cause: Optional[E.FencedError] = None
        self.expiry = self.renewal = None
        self.on_end: list = []  # called on the loop with the cause, once

    def start(self, sent: float):
        loop = self.s.loop
        self.deadline = sent + self.window
        self.expiry = loop.call_at(self.deadline, self._deadline_passed)
        self.renewal = loop.call_later(self._jittered(), self._renew_due)
        self.s.leases.add(self)

    def _jittered(self) -> float:
        return self.interval - random.uniform(0, self.interval / 10)

    def _deadline_passed(self):
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

    def _end(self, state: str, cause: E.FencedError):
        self.state, self.cause = state, cause
        for fn in self.on_end:
            try:
                fn(cause)
            except Exception:  # a callback's failure must not stop the others
                pass

    def lose(self, why, release: bool = True):
        """Lose the lease once: stop renewing, tell the callbacks, release in the background."""
        if not self._halt():
            return
        i = self.info
        self._end("lost", E.LeaseLost(f"lease lost: {i.key!r} token {i.token}: {why}"))
        if release:
            self.s.spawn(self.s.release_quietly(i.key, i.lease_id))

    async def release(self):
        halted = self._halt()
        if halted:
            self._end("released", E.LeaseReleased(f"lease released: {self.info.key!r} token {self.info.token}"))
        await self.s.release(self.info.key, self.info.lease_id, self.s.cfg.request_timeout)

    async def renew_once(self) -> float:
        """Send one renewal; return when it was sent (or, for the mutant, answered)."""
        loop = self.s.loop
        sent = loop.time()
        m = await self.s.renew(self.info.key, self.info.lease_id, self.s.cfg.request_timeout)
        if self.s.mutant:
            sent = loop.time()
        if m.get("tokenSignature"):
            self.signature = m["tokenSignature"]
        return sent

    def _renew_due(self):
        self.renewal = None
        self.s.spawn(self._renew())

    async def _renew(self):
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

    def __init__(self, cfg: Config, loop: asyncio.AbstractEventLoop):
        self.cfg = cfg.normalized()
        self.loop = loop
        self.eps = Endpoints(self.cfg)
        self.leases: set = set()
        self.tasks: set = set()
        self.mutant = os.environ.get(MUTANT_ENV, "") == "deadline-from-answer"
        # observe(method, request) -> done(status, data, exc); the torture
        # worker records every attempt with it.
        self.observe: Optional[Callable] = None

    def spawn(self, coro):
        t = self.loop.create_task(coro)
        self.tasks.add(t)
        t.add_done_callback(self.tasks.discard)
        return t

    async def _unary(self, ep: Endpoint, path: str, msg: dict, timeout: float, method: str = "") -> dict:
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
            return json.loads(data) if data else {}
        raise connect_error(status, data)

    async def call(self, method: str, msg: dict, timeout: float, service: str = SERVICE,
                   unanswered: Optional[list] = None) -> dict:
        """One call, failed over between endpoints; the attempts that may have
        arrived unanswered are appended to unanswered, if given."""
        deadline = self.loop.time() + timeout

        async def one(ep):
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
        ttl = self.cfg.ttl if ttl is None else ttl
        owner = owner or self.cfg.owner
        loop = self.loop
        start = loop.time()
        if timeout is None:
            timeout = wait + self.cfg.request_timeout
        deadline = start + timeout
        sent = start
        unanswered: list = []

        async def one(ep):
            nonlocal sent
            left = deadline - loop.time()
            if left <= 0:
                raise E.Timeout(f"acquire {key!r}: deadline passed")
            sent = loop.time()
            msg = {"key": key, "owner": owner, "ttlMs": str(int(round(ttl * 1000))),
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
        if self.mutant:
            sent = loop.time()
        info = info_from(m.get("lease") or {}, m.get("tokenSignature", ""))
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
                raise lease.cause from e
        lease.start(sent)
        return lease

    async def renew(self, key: str, lease_id: str, timeout: float) -> dict:
        return await self.call("Renew", {"key": key, "leaseId": lease_id}, timeout)

    async def release(self, key: str, lease_id: str, timeout: float) -> None:
        """Release; NotHeld when a node answered that the lease had already ended.

        An attempt that went unanswered may have released the lease before its
        answer was lost (the node died, or stopped leading). If the retry at the
        next endpoint then answers not_found, the lease was released by that
        attempt or expired: it is gone either way, and release returns
        normally (docs/client-algorithm.md, section 6).
        """
        unanswered: list = []
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

    async def get(self, key: str, timeout: float):
        m = await self.call("Get", {"key": key}, timeout)
        lease = info_from(m["lease"]) if m.get("lease") else None
        return lease, _int(m.get("lastToken")), _int(m.get("revision"))

    async def list(self, prefix: str, limit: int, timeout: float):
        m = await self.call("List", {"prefix": prefix, "limit": limit}, timeout)
        return [info_from(x) for x in m.get("leases") or []], _int(m.get("revision"))

    async def report_rejections(self, rejections: list, timeout: float) -> int:
        m = await self.call("ReportRejections", {"rejections": rejections}, timeout, REJECTIONS)
        return _int(m.get("recorded"))

    async def list_rejections(self, prefix: str, limit: int, timeout: float):
        m = await self.call("ListRejections", {"prefix": prefix, "limit": limit}, timeout, REJECTIONS)
        return m.get("rejections") or [], _int(m.get("total"))

    async def watch(self, prefix: str, after: int = 0, rejections: bool = False) -> AsyncIterator[Event]:
        """Yield events in order; see docs/client-algorithm.md, section 10."""
        broken = 0
        last_rev = at_last = skip = 0
        n = len(self.eps.eps)
        while True:
            opened = {}

            async def open_one(ep):
                opened["i"] = self.eps.eps.index(ep)
                return await ep.stream(SERVICE + "Watch", {"prefix": prefix, "afterRevision": str(after),
                                                           "rejections": rejections})

            w, body = await self.eps.do(open_one, None)
            err: Optional[BaseException] = None
            try:
                if broken and after == 0:
                    yield Event("RESYNC", None, 0)
                while True:
                    try:
                        head = await body.readexactly(5)
                        if head is None:
                            err = E.Unavailable("stream ended without an end-of-stream message")
                            break
                        flags, length = head[0], struct.unpack(">I", head[1:])[0]
                        payload = await body.readexactly(length) if length else b""
                    except (ConnectionError, asyncio.IncompleteReadError, OSError, ValueError) as e:
                        err = E.Unavailable(f"watch stream broken: {e}")
                        break
                    msg = json.loads(payload or b"{}")
                    if flags & 0x02:
                        if msg.get("error"):
                            err = error_from_body(msg["error"])
                        break
                    ev = msg.get("event") or {}
                    e = Event(ev.get("type", ""), info_from(ev["lease"]) if ev.get("lease") else None,
                              _int(ev.get("revision")), ev.get("rejection"))
                    if e.type != "RESYNC" and e.revision > 0:
                        if e.revision == last_rev and skip > 0:
                            skip -= 1
                            continue
                        if e.revision != last_rev:
                            last_rev, at_last = e.revision, 0
                        at_last += 1
                        after, broken, skip = last_rev - 1, 0, 0
                    yield e
            finally:
                w.close()
            broken += 1
            if n == 1 and err is None:
                return
            if n == 1 or broken > 2 * n:
                raise err or E.Unavailable("stream ended by the server")
            self.eps.failed_over(opened.get("i", 0))
            if last_rev:
                skip = at_last

    async def close(self, release: bool = True):
        """Lose every lease (releasing them unless release is False) and close connections."""
        held = list(self.leases)
        for lease in held:
            lease.lose("client closed", release=False)
        if release and held:
            await asyncio.gather(*(self.release_quietly(l.info.key, l.info.lease_id) for l in held))
        for t in list(self.tasks):
            t.cancel()
        for ep in self.eps.eps:
            ep.close()
