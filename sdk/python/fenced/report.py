"""Reporter: sends the stale rejections a guard makes to fenced (Go: fencereport).

    reporter = Reporter(client, resource="billing-db")
    guard = PostgresGuard(observer=reporter)
    ...
    reporter.close()

Guarantees: calling the reporter (observing a decision) never waits for the
network and never fails: it puts the rejection in a bounded queue (a dict
under a lock) and returns. At most queue_size distinct entries wait;
identical rejections (scope, tokens, owner) share one entry with a count.
sent + dropped + pending accounts for every rejection observed.

Non-guarantees: reports are best effort. A full queue drops new
rejections, and a batch fenced does not accept is dropped, not retried
(the reporter backs off up to a minute while fenced does not answer).
Accepted writes are not reported.
"""

from __future__ import annotations

import threading
from typing import Any, Dict, Optional, Tuple

from ._scope import valid_owner
from .errors import InvalidArgument
from .guards import Decision

MAX_BATCH = 1000
MAX_BACKOFF = 60.0


class Reporter:
    def __init__(self, client: Any, resource: str, queue_size: int = 4096, batch_size: int = 500,
                 flush_interval: float = 1.0, send_timeout: float = 5.0) -> None:
        if not resource or len(resource.encode()) > 128 or not valid_owner(resource):
            raise InvalidArgument(f"fencereport: resource {resource!r} must be 1 to 128 bytes of printable text")
        if queue_size < 1 or not 1 <= batch_size <= MAX_BATCH or flush_interval <= 0 or send_timeout <= 0:
            raise InvalidArgument("fencereport: queue_size >= 1, batch_size 1..1000, positive flush_interval and send_timeout")
        self.client, self.resource = client, resource
        self.queue_size, self.batch_size = queue_size, batch_size
        self.flush_interval, self.send_timeout = flush_interval, send_timeout
        self._mu = threading.Lock()
        self._pending: Dict[Tuple[str, int, int, str], int] = {}
        self._closed = False
        self._wake = threading.Event()
        self._stop = threading.Event()
        self.sent = self.dropped = 0
        self._thread = threading.Thread(target=self._run, name="fenced-reporter", daemon=True)
        self._thread.start()

    def __call__(self, d: Decision) -> None:
        """Observe a guard's Decision; only rejections are queued."""
        if d.accepted or d.presented >= d.highest:
            return
        k = (d.scope, d.presented, d.highest, d.owner)
        with self._mu:
            n = self._pending.get(k)
            if self._closed or (n is None and len(self._pending) >= self.queue_size) or n == 0xFFFFFFFF:
                self.dropped += 1
                return
            self._pending[k] = (n or 0) + 1
            ready = len(self._pending) >= self.batch_size
        if ready:
            self._wake.set()

    observe = __call__

    @property
    def pending(self) -> int:
        with self._mu:
            return len(self._pending)

    def _run(self) -> None:
        wait = self.flush_interval
        while not self._stop.is_set():
            if wait > self.flush_interval:
                self._stop.wait(wait)  # backing off: a full queue does not hurry it
            else:
                self._wake.wait(wait)
            self._wake.clear()
            if self._stop.is_set():
                return
            wait = min(2 * wait, MAX_BACKOFF) if self._send() else self.flush_interval

    def _send(self) -> bool:
        """Send what is pending; True if a batch failed."""
        with self._mu:
            taken, self._pending = self._pending, {}
        failed = False
        items = list(taken.items())
        for i in range(0, len(items), self.batch_size):
            chunk = items[i:i + self.batch_size]
            batch = [{"scope": s, "presentedToken": str(p), "highestToken": str(h), "owner": o,
                      "resource": self.resource, "count": n} for (s, p, h, o), n in chunk]
            count = sum(n for _, n in chunk)
            try:
                self.client.report_rejections(batch, timeout=self.send_timeout)
            except Exception:
                failed = True
                with self._mu:
                    self.dropped += count
            else:
                with self._mu:
                    self.sent += count
        return failed

    def close(self, timeout: Optional[float] = None) -> None:
        """Stop, then send what is pending once."""
        with self._mu:
            if self._closed:
                return
            self._closed = True
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout)
        self._send()
