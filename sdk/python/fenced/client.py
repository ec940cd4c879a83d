"""The synchronous client.

    from fenced import Client

    client = Client("http://127.0.0.1:7420")
    with client.acquire("jobs/nightly", ttl=10, wait=30) as lease:
        lease.check()              # raises LeaseLost once the lease is lost
        write(token=lease.token)   # present the token to a guarded resource

A Client runs one background thread with an event loop; every lease of the
client is renewed by that thread (at TTL/3, retried inside the window), so
the number of leases does not change the number of threads. The algorithm,
guarantees and non-guarantees are those of docs/client-algorithm.md:

Guarantees:
  - The local deadline counts from the send time of the last request that
    proved the lease current, on the monotonic clock, less the drift
    margin (ttl x (1 - clock_drift) - deadline_margin). lease.check()
    compares it with the clock itself (the loop's time(), time.monotonic()),
    so a lease is never reported live after its deadline even if the
    background thread is late.
  - A lost lease never comes back: a renewal whose answer is applied after
    the deadline (the thread was late) loses the lease instead of moving the
    deadline. After a loss one best-effort Release is sent in the background.
  - A lease that acquire returns is live (a grant that came back late is
    renewed once first).

Non-guarantees:
  - Nothing stops a paused process from writing after its lease was lost:
    present the token to a guard (fenced.guards).
  - An acquire that fails with Timeout or Unavailable may have been
    granted; that lease expires after its TTL. With several endpoints,
    AcquireUncertain says the caller may hold the key unseen.
  - on_lost callbacks run one after another on a callback thread of the
    client; a slow one delays the others.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import copy
import dataclasses
import logging
import queue
import threading
from types import TracebackType
from typing import (Any, AsyncIterator, Callable, Coroutine, Dict, Iterator, List, Mapping, NamedTuple, Optional,
                    Sequence, Set, Tuple, Type, TypeVar, Union)

from . import errors as E
from ._core import Config, Event, LeaseCore, LeaseInfo, Session

log = logging.getLogger("fenced")

T = TypeVar("T")
Callback = Callable[[E.LeaseLost], None]


class GetResult(NamedTuple):
    lease: Optional[LeaseInfo]  # None when the key is free
    last_token: int
    revision: int


class ListResult(NamedTuple):
    leases: List[LeaseInfo]
    revision: int


def _config(endpoints: Union[str, Sequence[str], None], config: Optional[Config], kw: Dict[str, Any]) -> Config:
    if config is None:
        unknown = sorted(set(kw) - {f.name for f in dataclasses.fields(Config)})
        if unknown:
            raise E.InvalidArgument(f"client config: unknown setting {unknown[0]!r}")
        config = Config(**kw)
    elif kw:
        raise E.InvalidArgument("client config: pass either config or keyword settings, not both")
    else:
        config = copy.copy(config)  # the caller's Config is left as it was
    if endpoints is not None:
        config.endpoints = endpoints if isinstance(endpoints, str) else list(endpoints)
    return config


class _LeaseView:
    """What a lease of either client tells of its grant (the sync Lease and aio.Lease)."""

    _core: LeaseCore

    @property
    def key(self) -> str:
        """The leased key, which is also the fencing scope."""
        return self._core.info.key

    @property
    def token(self) -> int:
        """The fencing token to present with every write."""
        return self._core.info.token

    @property
    def lease_id(self) -> str:
        return self._core.info.lease_id

    @property
    def owner(self) -> str:
        return self._core.info.owner

    @property
    def ttl(self) -> float:
        """The granted TTL in seconds."""
        return self._core.info.ttl

    @property
    def signature(self) -> str:
        """The server's signature of the token ('' unless the server signs); the newest renewal's."""
        return self._core.signature


class Lease(_LeaseView):
    """A held lease, renewed in the background until released or lost. Thread-safe."""

    def __init__(self, client: "Client", core: LeaseCore) -> None:
        self._client, self._core = client, core
        self.lost = threading.Event()
        self._mu = threading.Lock()
        self._callbacks: Optional[List[Callback]] = []
        core.on_end.append(self._ended)
        if core.state == "lost" and core.cause is not None:  # lost before this wrapper existed
            self._ended(core.cause)

    @property
    def deadline(self) -> float:
        """The local deadline, on the time.monotonic() clock."""
        return self._core.deadline

    def _ended(self, cause: E.FencedError) -> None:
        if self._core.state != "lost":
            return
        with self._mu:
            callbacks, self._callbacks = self._callbacks, None
        self.lost.set()
        for cb in callbacks or ():
            self._client._callback(cb, _lost(cause))

    @property
    def error(self) -> Optional[E.FencedError]:
        """None while held; then LeaseLost or LeaseReleased."""
        c = self._core
        if c.state == "held" and c.s.loop.time() >= c.deadline:  # time.monotonic(), or a test's clock
            return E.LeaseLost(f"lease lost: {c.info.key!r} token {c.info.token}: local deadline passed")
        return c.cause

    def check(self) -> None:
        """Raise LeaseLost (or LeaseReleased) unless the lease is certainly held now."""
        err = self.error
        if err is not None:
            if self._core.state == "held":  # the deadline passed; the loop has not seen it yet
                self._client._call_soon(self._core._deadline_passed)
            raise err

    def on_lost(self, callback: Callable[[E.LeaseLost], None]) -> None:
        """Call callback(cause) once when the lease is lost (at once if it already is).

        Callbacks run one after another on the client's callback thread, not
        on the thread that renews: a callback may call release() or any other
        method of the client, and a slow one delays only the callbacks after it.
        """
        with self._mu:
            if self._callbacks is not None:
                self._callbacks.append(callback)
                return
        callback(_lost(self._core.cause))

    def report_lost(self, why: object = "reported lost") -> None:
        """Mark the lease lost, for example after a resource refused its token (Go: Lease.Lost)."""
        self._client._run(self._lose(str(why)))

    async def _lose(self, why: str) -> None:
        self._core.lose(why)

    def orphan(self) -> None:
        """Stop renewing without releasing: the server expires the lease after its TTL."""
        self._client._run(self._lose_quiet())

    async def _lose_quiet(self) -> None:
        self._core.lose("orphaned, no longer renewed", release=False)

    def release(self) -> None:
        """Give the lease up. NotHeld: a node answered that it had already ended.

        After an attempt whose answer was lost (with several endpoints), a
        retry that finds the lease gone returns normally: released or
        expired, the lease is gone either way.
        """
        self._client._run(self._core.release())

    def __enter__(self) -> "Lease":
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        if self._core.state == "lost":
            return  # released in the background already
        try:
            self.release()
        except E.FencedError:
            if exc_type is None and self._core.state != "released":
                raise

    def __repr__(self) -> str:
        return f"<Lease {self.key!r} token={self.token} {self._core.state}>"


class Watch:
    """An iterator of Events; close() ends it from any thread."""

    def __init__(self, client: "Client", agen: AsyncIterator[Event]) -> None:
        self._client, self._agen = client, agen
        self._fut: Optional["concurrent.futures.Future[Event]"] = None
        self._closed = False

    def __iter__(self) -> Iterator[Event]:
        return self

    def __next__(self) -> Event:
        if self._closed:
            raise StopIteration
        fut = self._fut = asyncio.run_coroutine_threadsafe(_next(self._agen), self._client._loop)
        try:
            return fut.result()
        except StopAsyncIteration:
            self._closed = True
            raise StopIteration from None
        except asyncio.CancelledError:
            self._closed = True
            raise StopIteration from None
        finally:
            self._fut = None

    def close(self) -> None:
        self._closed = True
        fut = self._fut
        if fut is not None:
            fut.cancel()
        else:
            try:
                aclose = getattr(self._agen, "aclose", None)
                if aclose is not None:
                    asyncio.run_coroutine_threadsafe(aclose(), self._client._loop).result(5)
            except Exception:
                pass

    def __enter__(self) -> "Watch":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


async def _next(agen: AsyncIterator[Event]) -> Event:
    return await agen.__anext__()


def _lost(cause: Optional[E.FencedError]) -> E.LeaseLost:
    return cause if isinstance(cause, E.LeaseLost) else E.LeaseLost(str(cause))


class Client:
    """A fenced client. Thread-safe; one background thread renews all its leases.

    Client("http://a:7420,http://b:7420", ttl=10, token="...", ca_file="ca.pem")
    or Client(config=Config(...)).
    """

    def __init__(self, endpoints: Union[str, Sequence[str], None] = None, *, config: Optional[Config] = None,
                 **settings: Any) -> None:
        cfg = _config(endpoints, config, settings)
        self._loop = asyncio.new_event_loop()
        ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, args=(ready,), name="fenced-client", daemon=True)
        self._closed = False
        self._mu = threading.Lock()
        self._pending: Set["concurrent.futures.Future[Any]"] = set()  # calls in progress, failed by close()
        self._callbacks: Optional["queue.SimpleQueue[Optional[Tuple[Callback, E.LeaseLost]]]"] = None
        try:
            self._session = Session(cfg, self._loop)
        except Exception:
            self._loop.close()
            raise
        self._thread.start()
        ready.wait()

    def _serve(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.call_soon(ready.set)
        self._loop.run_forever()

    @property
    def config(self) -> Config:
        return self._session.cfg

    def _run(self, coro: Coroutine[Any, Any, T], timeout: Optional[float] = None) -> T:
        if self._closed:
            coro.close()
            raise E.FencedError("client closed", "canceled")
        if threading.current_thread() is self._thread:
            coro.close()  # waiting here for the loop that runs this thread would never end
            raise E.FencedError("a blocking call of the client on its own renewal thread", "failed_precondition")
        fut = asyncio.run_coroutine_threadsafe(coro, self._loop)
        with self._mu:
            self._pending.add(fut)
        try:
            return fut.result(timeout)
        except BaseException:
            fut.cancel()
            raise
        finally:
            with self._mu:
                self._pending.discard(fut)

    def _callback(self, fn: Callback, cause: E.LeaseLost) -> None:
        """Run fn(cause) on the callback thread (started on first use)."""
        with self._mu:
            if self._callbacks is None:
                self._callbacks = queue.SimpleQueue()
                threading.Thread(target=self._run_callbacks, args=(self._callbacks,), name="fenced-callbacks",
                                 daemon=True).start()
            self._callbacks.put((fn, cause))

    @staticmethod
    def _run_callbacks(q: "queue.SimpleQueue[Optional[Tuple[Callback, E.LeaseLost]]]") -> None:
        while True:
            item = q.get()
            if item is None:
                return
            fn, cause = item
            try:
                fn(cause)
            except Exception:  # a callback's failure must not stop the others
                log.exception("fenced: an on_lost callback failed")

    def _call_soon(self, fn: Callable[[], None]) -> None:
        if not self._closed:
            self._loop.call_soon_threadsafe(fn)

    def acquire(self, key: str, ttl: Optional[float] = None, wait: float = 0, owner: str = "",
                timeout: Optional[float] = None) -> Lease:
        """Acquire key; wait up to wait seconds for a held key (first come, first served).

        Raises Held (with the holder), AcquireUncertain, Timeout (timeout
        defaults to wait + request_timeout), Unavailable, InvalidArgument,
        Unauthenticated, PermissionDenied. A timed-out or unavailable acquire
        may have been granted; that lease then expires after its TTL.
        """
        core = self._run(self._session.acquire(key, ttl, wait, owner, timeout))
        return Lease(self, core)

    def renew(self, key: str, lease_id: str, timeout: Optional[float] = None) -> LeaseInfo:
        """Renew a lease by its ID once, for callers that manage renewal themselves."""
        from ._core import info_from

        m = self._run(self._session.renew(key, lease_id, timeout or self.config.request_timeout))
        return info_from(m.get("lease") or {}, m.get("tokenSignature", ""))

    def release(self, key: str, lease_id: str, timeout: Optional[float] = None) -> None:
        """Release a lease by its ID; NotHeld and lost answers as Lease.release."""
        self._run(self._session.release(key, lease_id, timeout or self.config.request_timeout))

    def get(self, key: str, timeout: Optional[float] = None) -> GetResult:
        return GetResult(*self._run(self._session.get(key, timeout or self.config.request_timeout)))

    def list(self, prefix: str = "", limit: int = 0, timeout: Optional[float] = None) -> ListResult:
        return ListResult(*self._run(self._session.list(prefix, limit, timeout or self.config.request_timeout)))

    def watch(self, prefix: str = "", after_revision: int = 0, rejections: bool = False) -> Watch:
        """Iterate over the transitions under prefix. On a RESYNC event, list again and
        watch from the list's revision (docs/protocol.md)."""
        agen = self._session.watch(prefix, after_revision, rejections)
        return Watch(self, agen)

    def report_rejections(self, rejections: Sequence[Mapping[str, Any]], timeout: Optional[float] = None) -> int:
        return self._run(self._session.report_rejections(rejections, timeout or self.config.request_timeout))

    def list_rejections(self, prefix: str = "", limit: int = 0,
                        timeout: Optional[float] = None) -> Tuple[List[Dict[str, Any]], int]:
        return self._run(self._session.list_rejections(prefix, limit, timeout or self.config.request_timeout))

    def close(self, release: bool = True) -> None:
        """Lose every held lease (releasing them, best effort) and stop the background thread."""
        if self._closed:
            return
        try:
            self._run(self._session.close(release), 2 * self.config.request_timeout)
        except Exception:
            pass
        with self._mu:
            self._closed = True
            pending, callbacks = list(self._pending), self._callbacks
        if callbacks is not None:
            callbacks.put(None)  # the callbacks of the leases close() lost still run
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        for fut in pending:  # a call that a callback made while the client closed
            if not fut.done():
                try:
                    fut.set_exception(E.FencedError("client closed", "canceled"))
                except Exception:
                    pass
        if not self._loop.is_running():
            self._loop.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
