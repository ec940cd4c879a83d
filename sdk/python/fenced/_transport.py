"""HTTP/1.1 to one fenced node over asyncio streams: a pool of kept-alive
connections, unary Connect calls and server streams, the cluster pin.

The framing itself (heads, chunked bodies, envelopes) is _wire's; what to
send and when to fail over is _core's (docs/client-algorithm.md).
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl as _ssl
import urllib.parse
from typing import TYPE_CHECKING, Any, AsyncGenerator, List, Mapping, Optional, Set, Tuple

from . import _wire
from . import errors as E

if TYPE_CHECKING:
    from ._core import Config

# Every node names its cluster in this response header (docs/protocol.md).
CLUSTER_ID_HEADER = "fenced-cluster-id"
USER_AGENT = "fenced-python/0.1"

log = logging.getLogger("fenced")

Conn = Tuple[asyncio.StreamReader, asyncio.StreamWriter]

# What a broken connection or a malformed answer raises while reading.
BROKEN = (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError, ValueError)


class Pin:
    """The cluster a client is pinned to (docs/client-algorithm.md, section 7).

    The first cluster ID an answer names (or Config.cluster_id) is pinned;
    an answer naming another is never used: check raises ClusterMismatch, an
    Unavailable, so the call fails over as after a connection failure. Each
    such endpoint is logged once, at error level. An answer without the
    header (an older server) is accepted.
    """

    def __init__(self, cluster_id: str = "") -> None:
        self.id = cluster_id
        self.reported: Set[str] = set()

    def check(self, url: str, got: str) -> None:
        """Pin got unless a cluster is pinned; raise ClusterMismatch if got names another."""
        if got and not self.id:
            self.id = got
        self.foreign(url, got)

    def foreign(self, url: str, got: str) -> None:
        """Raise ClusterMismatch if got names another cluster than the pinned one; never pins."""
        if not got or not self.id or got == self.id:
            return
        err = E.ClusterMismatch(url, self.id, got)
        if url not in self.reported:
            self.reported.add(url)
            log.error("fenced client: an endpoint belongs to another cluster; its answers are not used: %s", err)
        raise err


class Body:
    """A response body read from a connection as its framing says: chunked,
    a Content-Length, or up to the end of the connection."""

    def __init__(self, r: asyncio.StreamReader, headers: Mapping[str, str]) -> None:
        self.r = r
        chunked, self.left = _wire.body_framing(headers)
        self.chunks = _wire.ChunkedDecoder() if chunked else None
        self.done = False

    async def read(self) -> bytes:
        """The next piece of the body; b"" at its end. IncompleteReadError if the connection ends first."""
        while not self.done:
            if self.chunks is not None:
                raw = await self.r.read(65536)
                if not raw:
                    raise asyncio.IncompleteReadError(b"", None)
                piece = self.chunks.feed(raw)
                self.done = self.chunks.done
            elif self.left is not None:
                if self.left == 0:
                    self.done = True
                    return b""
                piece = await self.r.read(min(self.left, 65536))
                if not piece:
                    raise asyncio.IncompleteReadError(b"", self.left)
                self.left -= len(piece)
            else:
                piece = await self.r.read(65536)
                if not piece:
                    self.done = True
            if piece:
                return piece
        return b""

    async def readall(self) -> bytes:
        out = bytearray()
        while True:
            piece = await self.read()
            if not piece:
                return bytes(out)
            out += piece


async def frames(body: Body) -> AsyncGenerator[Tuple[int, bytes], None]:
    """The Connect envelopes of a stream's body, as (flags, payload).

    Ends after the end-of-stream envelope; raises Unavailable if the stream
    breaks or ends without one.
    """
    dec = _wire.EnvelopeDecoder()
    while True:
        try:
            piece = await body.read()
            got = dec.feed(piece)
        except BROKEN as e:
            raise E.Unavailable(f"watch stream broken: {type(e).__name__}: {e}") from e
        if not piece:
            raise E.Unavailable("stream ended " + ("inside a message" if dec.pending else
                                                   "without an end-of-stream message"))
        for flags, payload in got:
            yield flags, payload
            if flags & _wire.END_STREAM:
                return


class Endpoint:
    """One node: a pool of keep-alive HTTP/1.1 connections."""

    IDLE_FOR = 30.0  # well below the server's idle timeout (2 minutes)

    def __init__(self, url: str, cfg: "Config", pin: Optional[Pin] = None) -> None:
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
        self.idle: List[Tuple[asyncio.StreamReader, asyncio.StreamWriter, float]] = []

    async def _open(self) -> Conn:
        try:
            return await asyncio.open_connection(self.host, self.port, ssl=self.ssl, server_hostname=self.server_name)
        except ConnectionRefusedError as e:
            raise E.Unavailable(f"{self.url}: connection refused", may_have_arrived=False) from e
        except _ssl.SSLError as e:
            raise E.Unavailable(f"{self.url}: TLS: {e}", may_have_arrived=False) from e
        except OSError as e:
            raise E.Unavailable(f"{self.url}: {e}", may_have_arrived=False) from e

    def _take(self) -> Optional[Conn]:
        loop = asyncio.get_running_loop()
        while self.idle:
            r, w, t = self.idle.pop()
            if loop.time() - t < self.IDLE_FOR and not r.at_eof() and not w.is_closing():
                return r, w
            w.close()
        return None

    def close(self) -> None:
        for _, w, _ in self.idle:
            w.close()
        self.idle.clear()

    def _head(self, method: str, path: str, ctype: str, n: int, timeout: Optional[float]) -> bytes:
        h = [("Host", self.hostport)]
        if method == "POST":
            h += [("Content-Type", ctype), ("Content-Length", str(n)), ("Connect-Protocol-Version", "1")]
        h.append(("User-Agent", USER_AGENT))
        if timeout is not None:
            h.append(("Connect-Timeout-Ms", str(max(1, int(timeout * 1000)))))
        if self.auth:
            h.append(("Authorization", self.auth))
        if method == "GET":
            h.append(("Connection", "close"))
        return _wire.request_head(method, self.base + path, h)

    @staticmethod
    async def _read_head(r: asyncio.StreamReader) -> Tuple[int, _wire.Headers]:
        return _wire.parse_response_head(await r.readuntil(b"\r\n\r\n"))

    async def post(self, path: str, body: bytes, timeout: float, idempotent: bool) -> Tuple[int, bytes]:
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
                w.write(self._head("POST", path, "application/json", len(body), timeout) + body)
                await w.drain()
                status, hdrs = await self._read_head(r)
                got = True
                data = await Body(r, hdrs).readall()
            except BROKEN as e:
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

    async def stream(self, path: str, msg: Mapping[str, Any]) -> Tuple[asyncio.StreamWriter, Body]:
        """Open a server stream; returns (writer, body): read its envelopes with frames(body)."""
        r, w = await self._open()
        env = _wire.envelope(0, json.dumps(msg).encode())
        try:
            w.write(self._head("POST", path, "application/connect+json", len(env), None) + env)
            await w.drain()
            status, hdrs = await self._read_head(r)
            try:
                self.pin.check(self.url, hdrs.get(CLUSTER_ID_HEADER, ""))
            except E.ClusterMismatch:
                w.close()
                raise
            body = Body(r, hdrs)
            if status != 200:
                data = await body.readall()
                w.close()
                raise _wire.connect_error(status, data)
        except BROKEN as e:
            w.close()
            raise E.Unavailable(f"{self.url}: {type(e).__name__}: {e}") from e
        return w, body

    async def leads(self) -> bool:
        """Whether the node answers GET /v1/role as the ready leader of the pinned cluster."""
        try:
            r, w = await self._open()
        except E.FencedError:
            return False
        try:
            w.write(self._head("GET", "/v1/role", "", 0, None))
            await w.drain()
            status, hdrs = await self._read_head(r)
            self.pin.foreign(self.url, hdrs.get(CLUSTER_ID_HEADER, ""))
            role = json.loads(await Body(r, hdrs).readall())
            return status == 200 and role.get("role") == "leader" and bool(role.get("ready"))
        except Exception:
            return False
        finally:
            w.close()
