"""A torture worker in Python: `fencectl torture --worker-cmd '/usr/bin/python3 sdk/python/torture/worker.py'`.

It follows the worker protocol of docs/torture.md: read the spec JSON
given after --spec, run the Go worker's loop (acquire a random key, make
fenced writes to the reference store and PostgreSQL, renew, release or
abandon, with think times), print the same events on standard output, and
append the same history records to spec.history, one write(2) per record.
Every lease call is recorded at the wire, each attempt on its own, the
background renewals included. SIGTERM ends the loop once the lease in hand
is finished.

Like the Go worker it never looks at its lease before writing: every write
behaves like one from a process paused between its check and its write, so
the guards are what is tested. It records, with every write, the lease's
local deadline, which the client-deadline-conservative checker holds
against the history (FENCED_TORTURE_MUTANT=deadline-from-answer must be caught).
"""

from __future__ import annotations

import http.client
import json
import os
import random
import signal
import sys
import threading
import time
import urllib.parse

# Test harness, not part of the fenced package: run from a clone, it uses the
# package beside it (sdk/python/fenced).
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from fenced import errors as E  # noqa: E402
from fenced._core import _int  # noqa: E402
from fenced.client import Client  # noqa: E402
from fenced.guards.http import fencing_headers, stale_from  # noqa: E402
from fenced.guards.postgres import PostgresGuard  # noqa: E402

NS = 1_000_000_000

# The mutant the torture harness must catch: the local deadline counted
# from when the answer arrived instead of when the request was sent.
MUTANT_ENV = "FENCED_TORTURE_MUTANT"


def _secs(ns) -> float:
    return (ns or 0) / NS


class Recorder:
    """Appends history records (JSON lines), one write(2) each, so they survive a SIGKILL."""

    def __init__(self, path: str, worker: int, incarnation: int):
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.worker, self.seq = worker, incarnation * 1_000_000_000
        self.mu = threading.Lock()

    def begin(self, op: dict) -> dict:
        with self.mu:
            self.seq += 1
            op["w"], op["n"] = self.worker, self.seq
            op["call"] = time.time_ns()
            self._write(op)
        return op

    def end(self, op: dict, outcome: str, code: str = "", err=None):
        op["ret"] = time.time_ns()
        op["outcome"] = outcome
        if code:
            op["code"] = code
        if err is not None:
            op["err"] = str(err)
        with self.mu:
            self._write(op)

    def _write(self, op: dict):
        # Go's encoding: the fields in Op's order, the omitempty ones dropped when zero.
        order = ("w", "n", "kind", "key", "owner", "leaseId", "ttlMs", "waitMs", "token", "object", "via", "deadline",
                 "call", "ret", "outcome", "code", "holder", "holderToken", "hasLease", "lastToken", "err")
        always = {"w", "n", "kind", "key", "call"}
        rec = {k: op[k] for k in order if k in op and (k in always or op[k])}
        os.write(self.fd, (json.dumps(rec, separators=(",", ":")) + "\n").encode())


def transport_outcome(exc: BaseException):
    """Only a refused connection proves that nothing was sent."""
    if isinstance(exc, E.Unavailable) and not exc.may_have_arrived:
        return "fail", "refused"
    if isinstance(exc, ConnectionRefusedError):
        return "fail", "refused"
    if isinstance(exc, (TimeoutError, E.Timeout)):
        return "unknown", "timeout"
    return "unknown", "transport"


class LeaseRecorder:
    """The client's observe hook: records Acquire, Renew, Release and Get attempts."""

    KINDS = {"Acquire": "acquire", "Renew": "renew", "Release": "release", "Get": "get"}

    def __init__(self, rec: Recorder, on_ack):
        self.rec, self.on_ack = rec, on_ack
        self.owners: dict = {}

    def __call__(self, method: str, msg: dict):
        kind = self.KINDS.get(method)
        if kind is None:
            return None
        op = {"kind": kind, "key": msg.get("key", "")}
        if kind == "acquire":
            op.update(owner=msg.get("owner", ""), ttlMs=_int(msg.get("ttlMs")), waitMs=_int(msg.get("waitMs")))
        elif kind in ("renew", "release"):
            op["leaseId"] = msg.get("leaseId", "")
            op["owner"] = self.owners.get(op["leaseId"], "id:" + op["leaseId"])
        self.rec.begin(op)
        return lambda status, data, exc: self.done(op, status, data, exc)

    def done(self, op, status, data, exc):
        if exc is not None:
            outcome, code = transport_outcome(exc)
            self.rec.end(op, outcome, code, exc)
            return
        if status != 200:
            self.error(op, status, data)
            return
        try:
            m = json.loads(data) if data else {}
        except ValueError as e:
            self.rec.end(op, "unknown", "transport", e)
            return
        kind = op["kind"]
        if kind in ("acquire", "renew"):
            lease = m.get("lease") or {}
            op["token"], op["ttlMs"] = _int(lease.get("token")), _int(lease.get("ttlMs"))
            if kind == "acquire":
                op["leaseId"] = lease.get("leaseId", "")
                self.owners[op["leaseId"]] = op["owner"]
        elif kind == "get":
            op["lastToken"] = _int(m.get("lastToken"))
            if m.get("lease"):
                op["hasLease"], op["holder"], op["holderToken"] = True, m["lease"].get("owner", ""), _int(m["lease"].get("token"))
        self.rec.end(op, "ok")
        if kind != "get":
            self.on_ack(op)

    def error(self, op, status, data):
        try:
            body = json.loads(data)
            code, message = body.get("code", ""), body.get("message", "")
        except (ValueError, AttributeError):
            code = ""
        if not code:
            self.rec.end(op, "unknown", "transport", f"HTTP {status}: {data[:200]!r}")
            return
        err = f"{code}: {message}"
        if code == "failed_precondition":
            from fenced._wire import error_from_body

            held = error_from_body(body)
            if isinstance(held, E.Held):
                op["holder"], op["holderToken"] = held.owner, held.token
            if op["kind"] == "acquire" and op.get("holder") and op["holder"] == op.get("owner"):
                # Owners are unique per attempt: the holder is this very acquisition.
                self.rec.end(op, "unknown", "held", err)
                return
            self.rec.end(op, "fail", "held", err)
        elif code == "not_found":
            self.rec.end(op, "fail", "not_found", err)
        elif code in ("invalid_argument", "resource_exhausted"):
            self.rec.end(op, "fail", code, err)
        elif code == "unavailable":
            if "not ready to serve" in message:
                self.rec.end(op, "fail", "unavailable", err)
            else:
                self.rec.end(op, "unknown", code, err)
        else:
            self.rec.end(op, "unknown", code, err)


class Worker:
    def __init__(self, spec: dict):
        self.spec = spec
        sid, inc = spec["id"], spec.get("incarnation", 0)
        self.name = f"w{sid}" if not inc else f"w{sid}.{inc}"
        self.rec = Recorder(spec["history"], sid, inc)
        self.rng = random.Random((spec.get("seed", 0) << 32) ^ (sid << 16) ^ inc)
        self.ttl = _secs(spec["ttl"])
        self.events_mu = threading.Lock()
        self.stop = threading.Event()
        endpoints = spec.get("endpoints") or [spec["endpoint"]]
        self.client = Client(endpoints, owner=self.name, ttl=self.ttl, request_timeout=max(self.ttl / 2, 0.1))
        self.client._session.observe = LeaseRecorder(self.rec, lambda op: self.emit(e="acked", k=op["key"], o=op["kind"]))
        if os.environ.get(MUTANT_ENV, "") == "deadline-from-answer":
            session = self.client._session
            session.proof_time = lambda sent: session.loop.time()  # the answer's time, not the send's
        self.attempts = self.held = self.writes = 0
        self.db = self.guard = None
        if spec.get("postgresDsn"):
            import psycopg

            self.db = psycopg.connect(spec["postgresDsn"], autocommit=False)
            self.guard = PostgresGuard(table=spec["scopeTable"])
            self.write_sql = ('INSERT INTO "' + spec["writeTable"].replace('"', '""') +
                              '" (scope, token, worker, object) VALUES (%s, %s, %s, %s)')

    def emit(self, **ev):
        line = json.dumps({k: v for k, v in ev.items() if v}, separators=(",", ":")) + "\n"
        with self.events_mu:
            sys.stdout.write(line)
            sys.stdout.flush()

    def key(self) -> str:
        keys = self.spec["keys"]
        return keys[self.rng.randrange(len(keys))]

    def run(self):
        s = self.spec
        while not self.stop.is_set():
            if self.rng.random() < s.get("getProbability", 0):
                try:
                    self.client.get(self.key(), timeout=max(self.ttl, 1.0))
                except Exception:
                    pass
            key = self.key()
            self.attempts += 1
            owner = f"{self.name}-{self.attempts}"
            self.emit(e="acquiring", k=key)
            wait = _secs(s.get("wait"))
            if self.rng.random() < s.get("tryProbability", 0):
                wait = 0
            try:
                lease = self.client.acquire(key, ttl=self.ttl, wait=wait, owner=owner, timeout=wait + self.ttl)
            except Exception as e:
                self.emit(e="idle")
                backoff = self.ttl / 20 if isinstance(e, E.Held) else self.ttl / 4
                self.stop.wait(self.rng.uniform(0, backoff))
                continue
            self.held += 1
            self.emit(e="holding", k=key, t=lease.token, l=self.held)
            self.hold(lease)
            self.emit(e="idle")

    def hold(self, lease):
        s = self.spec
        n = s["writesMin"] + self.rng.randint(0, max(0, s["writesMax"] - s["writesMin"]))
        think = _secs(s.get("thinkMax"))
        if self.rng.random() < s.get("longHoldShare", 0):
            think = max(think, 4 * self.ttl / n)
        for _ in range(n):
            time.sleep(self.rng.uniform(0, think))
            delayed = bool(s.get("proxyUrl")) and self.rng.random() < s.get("delayShare", 0)
            r = self.put(lease, delayed)
            if r == "stale":
                return
            if r == "abandon":
                self.release(lease)
                return
            if self.guard is not None and self.sql(lease) == "stale":
                return
        if self.rng.random() < s.get("abandonProbability", 0):
            lease.orphan()
            return
        self.release(lease)

    def release(self, lease):
        try:
            lease.release()
        except Exception:
            pass
        self.emit(e="released", k=lease.key)

    def deadline_ns(self, lease) -> int:
        return time.time_ns() + int((lease.deadline - time.monotonic()) * NS)

    def put(self, lease, delayed: bool) -> str:
        s = self.spec
        self.writes += 1
        base, via, timeout = s["storeUrl"], "direct", _secs(s["writeTimeout"])
        if delayed:
            base, via, timeout = s["proxyUrl"], "proxy", _secs(s["delayedWriteTimeout"])
        obj = f"{lease.key}/{self.name}/{self.writes}"
        op = {"kind": "put", "key": lease.key, "token": lease.token, "object": obj, "via": via,
              "deadline": self.deadline_ns(lease)}
        value = f"{lease.key}|{lease.token}|w{s['id']}|{obj}".encode()
        u = urllib.parse.urlsplit(base.rstrip("/"))
        self.rec.begin(op)
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
        try:
            conn.request("PUT", u.path + "/v1/objects/" + urllib.parse.quote(obj, safe=""), body=value,
                         headers=fencing_headers(lease))
            resp = conn.getresponse()
            body = resp.read(4096)
            status, ctype = resp.status, resp.getheader("Content-Type")
        except Exception as e:
            outcome, code = transport_outcome(e if not isinstance(e, OSError) or not _refused(e) else ConnectionRefusedError())
            self.rec.end(op, outcome, code, e)
            return "abandon" if delayed and outcome == "unknown" else "failed"
        finally:
            conn.close()
        if status // 100 == 2:
            self.rec.end(op, "ok")
            return "ok"
        if status == 409:
            self.rec.end(op, "fail", "stale", f"HTTP 409: {body.strip().decode('utf-8', 'replace')}")
            stale = stale_from(status, ctype, body)
            lease.report_lost(stale or "HTTP 409")
            return "stale"
        if status >= 500:
            self.rec.end(op, "unknown", f"http_{status}", body.strip().decode("utf-8", "replace"))
            return "failed"
        self.rec.end(op, "fail", f"http_{status}", body.strip().decode("utf-8", "replace"))
        return "failed"

    def sql(self, lease) -> str:
        s = self.spec
        self.writes += 1
        obj = f"{lease.key}/{self.name}/{self.writes}"
        op = {"kind": "sql", "key": lease.key, "token": lease.token, "object": obj, "deadline": self.deadline_ns(lease)}
        args = (lease.key, lease.token, s["id"], obj)
        self.rec.begin(op)
        try:
            timeout_ms = int(_secs(s["writeTimeout"]) * 1000)
            if s.get("noFencing"):
                with self.db.transaction(), self.db.cursor() as cur:
                    cur.execute(f"SET LOCAL statement_timeout = {timeout_ms}")
                    cur.execute(self.write_sql, args)
            else:
                def insert(cur):
                    cur.execute(f"SET LOCAL statement_timeout = {timeout_ms}")
                    cur.execute(self.write_sql, args)

                self.guard.do(self.db, lease.key, lease.token, insert)
        except E.StaleToken as e:
            self.rec.end(op, "fail", "stale", e)
            lease.report_lost(e)
            return "stale"
        except Exception as e:
            # The commit may have happened before the connection broke.
            self.rec.end(op, "unknown", "transport", e)
            if self.db.closed or self.db.broken:
                import psycopg

                self.db = psycopg.connect(s["postgresDsn"], autocommit=False)
            return "failed"
        self.rec.end(op, "ok")
        return "ok"


def _refused(e: OSError) -> bool:
    return isinstance(e, ConnectionRefusedError)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2 or argv[0] != "--spec":
        print("usage: python3 sdk/python/torture/worker.py --spec JSON", file=sys.stderr)
        return 2
    w = Worker(json.loads(argv[1]))
    signal.signal(signal.SIGTERM, lambda *_: w.stop.set())
    signal.signal(signal.SIGINT, lambda *_: w.stop.set())
    try:
        w.run()
    finally:
        w.client.close(release=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
