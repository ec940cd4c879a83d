"""The asyncio client: the same shape as fenced.Client, on the caller's event loop.

    from fenced import aio

    async with aio.Client("http://127.0.0.1:7420") as client:
        async with client.acquire("jobs/nightly", ttl=10, wait=30) as lease:
            lease.check()
            await write(token=lease.token)

Leases are renewed by timers of the loop the client was first used on (the
algorithm of docs/client-algorithm.md, as fenced.Client). lease.lost is an
asyncio.Event. A loop blocked for longer than a renewal interval delays
renewals; lease.check() still compares the deadline with the loop's clock
itself, so a lease is never reported live after its deadline, and a renewal
answered before the deadline but applied after it loses the lease.
"""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator, Callable, Coroutine, Dict, Generator, List, Mapping, Optional, Sequence, Tuple, Union

from . import errors as E
from ._core import Config, Event, LeaseCore, LeaseInfo, Session, info_from
from .client import Callback, GetResult, ListResult, _config, _LeaseView, _lost

__all__ = ["Client", "Lease", "Config", "Event", "LeaseInfo"]


class Lease(_LeaseView):
    """A held lease on the client's loop."""

    def __init__(self, core: LeaseCore) -> None:
        self._core = core
        self.lost = asyncio.Event()
        self._callbacks: Optional[List[Callback]] = []
        core.on_end.append(self._ended)
        if core.state == "lost" and core.cause is not None:
            self._ended(core.cause)

    @property
    def deadline(self) -> float:
        """The local deadline, on the loop's clock (time.monotonic())."""
        return self._core.deadline

    def _ended(self, cause: E.FencedError) -> None:
        if self._core.state != "lost":
            return
        callbacks, self._callbacks = self._callbacks, None
        self.lost.set()
        for cb in callbacks or ():
            try:
                cb(_lost(cause))
            except Exception:
                pass

    @property
    def error(self) -> Optional[E.FencedError]:
        c = self._core
        if c.state == "held" and c.s.loop.time() >= c.deadline:  # time.monotonic(), or a test's clock
            return E.LeaseLost(f"lease lost: {c.info.key!r} token {c.info.token}: local deadline passed")
        return c.cause

    def check(self) -> None:
        err = self.error
        if err is not None:
            if self._core.state == "held":
                self._on_loop(self._core._deadline_passed)
            raise err

    def on_lost(self, callback: Callable[[E.LeaseLost], None]) -> None:
        if self._callbacks is not None:
            self._callbacks.append(callback)
        else:
            callback(_lost(self._core.cause))

    def _on_loop(self, fn: Callable[..., None], *args: Any) -> None:
        loop = self._core.s.loop
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            fn(*args)
        else:
            loop.call_soon_threadsafe(fn, *args)

    def report_lost(self, why: object = "reported lost") -> None:
        """Mark the lease lost (from any thread), e.g. after a stale rejection."""
        self._on_loop(self._core.lose, str(why))

    def orphan(self) -> None:
        self._on_loop(self._core.lose, "orphaned, no longer renewed", False)

    async def release(self) -> None:
        await self._core.release()

    async def __aenter__(self) -> "Lease":
        return self

    async def __aexit__(self, exc_type: Optional[type], exc: Optional[BaseException], tb: object) -> None:
        if self._core.state == "lost":
            return
        try:
            await self.release()
        except E.FencedError:
            if exc_type is None and self._core.state != "released":
                raise


class _Acquiring:
    """What Client.acquire returns: await it, or use it with async with."""

    def __init__(self, coro: Coroutine[Any, Any, Lease]) -> None:
        self._coro = coro
        self._lease: Optional[Lease] = None

    def __await__(self) -> Generator[Any, None, Lease]:
        return self._coro.__await__()

    async def __aenter__(self) -> Lease:
        lease = self._lease = await self._coro
        return lease

    async def __aexit__(self, exc_type: Optional[type], exc: Optional[BaseException], tb: object) -> None:
        if self._lease is not None:
            await self._lease.__aexit__(exc_type, exc, tb)


class Client:
    """An asyncio fenced client, bound to the loop it is first used on."""

    def __init__(self, endpoints: Union[str, Sequence[str], None] = None, *, config: Optional[Config] = None,
                 **settings: Any) -> None:
        self._cfg = _config(endpoints, config, settings).normalized()
        self._session: Optional[Session] = None

    @property
    def config(self) -> Config:
        return self._cfg

    def _s(self) -> Session:
        if self._session is None:
            self._session = Session(self._cfg, asyncio.get_running_loop())
        return self._session

    def acquire(self, key: str, ttl: Optional[float] = None, wait: float = 0, owner: str = "",
                timeout: Optional[float] = None) -> _Acquiring:
        async def go() -> Lease:
            return Lease(await self._s().acquire(key, ttl, wait, owner, timeout))

        return _Acquiring(go())

    async def renew(self, key: str, lease_id: str, timeout: Optional[float] = None) -> LeaseInfo:
        m = await self._s().renew(key, lease_id, timeout or self._cfg.request_timeout)
        return info_from(m.get("lease") or {}, m.get("tokenSignature", ""))

    async def release(self, key: str, lease_id: str, timeout: Optional[float] = None) -> None:
        await self._s().release(key, lease_id, timeout or self._cfg.request_timeout)

    async def get(self, key: str, timeout: Optional[float] = None) -> GetResult:
        return GetResult(*await self._s().get(key, timeout or self._cfg.request_timeout))

    async def list(self, prefix: str = "", limit: int = 0, timeout: Optional[float] = None) -> ListResult:
        return ListResult(*await self._s().list(prefix, limit, timeout or self._cfg.request_timeout))

    def watch(self, prefix: str = "", after_revision: int = 0, rejections: bool = False) -> AsyncIterator[Event]:
        """An async iterator of Events (RESYNC: list again, watch from its revision)."""
        return self._s().watch(prefix, after_revision, rejections)

    async def report_rejections(self, rejections: Sequence[Mapping[str, Any]], timeout: Optional[float] = None) -> int:
        return await self._s().report_rejections(rejections, timeout or self._cfg.request_timeout)

    async def list_rejections(self, prefix: str = "", limit: int = 0,
                              timeout: Optional[float] = None) -> Tuple[List[Dict[str, Any]], int]:
        return await self._s().list_rejections(prefix, limit, timeout or self._cfg.request_timeout)

    async def close(self, release: bool = True) -> None:
        if self._session is not None:
            await self._session.close(release)

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
