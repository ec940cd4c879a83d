"""The client algorithm against a real fenced (docs/client-algorithm.md, section 11)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import pytest

import fenced
from fenced import Client, _core, _wire, aio


def test_acquire_renews_past_the_ttl_and_release_frees(client, key):
    lease = client.acquire(key, ttl=1)
    assert lease.token > 0 and lease.lease_id and lease.key == key
    time.sleep(2.5)  # renewed at TTL/3: still held after more than two TTLs
    lease.check()
    assert not lease.lost.is_set()
    got = client.get(key)
    assert got.lease.token == lease.token and got.lease.lease_id == "" and got.revision >= lease.token
    assert [l.key for l in client.list(key).leases] == [key]
    lease.release()
    with pytest.raises(fenced.LeaseReleased):
        lease.check()
    assert not lease.lost.is_set()
    assert client.get(key).lease is None


def test_held_names_the_holder(client, key):
    with client.acquire(key, owner="alice") as lease:
        with pytest.raises(fenced.Held) as e:
            client.acquire(key, owner="bob")
        assert (e.value.owner, e.value.token, e.value.key) == ("alice", lease.token, key)
        assert 0 < e.value.remaining <= 2
    assert client.get(key).lease is None  # the with block released it


def test_invalid_key_is_refused(client):
    with pytest.raises(fenced.InvalidArgument):
        client.acquire("bad\x01key")
    with pytest.raises(fenced.InvalidArgument):
        Client("http://127.0.0.1:1", ttl=0.01)


def test_tokens_increase_and_renewal_keeps_the_token(client, key):
    tokens = []
    for _ in range(3):
        with client.acquire(key) as lease:
            info = client.renew(key, lease.lease_id)
            assert info.token == lease.token
            tokens.append(lease.token)
    assert tokens == sorted(set(tokens))


def record_calls(c: Client):
    calls = []

    def observe(method, msg):
        sent = time.monotonic()
        return lambda status, data, exc: calls.append((method, sent, time.monotonic(), status))

    c._session.observe = observe
    return calls


def test_deadline_counts_from_the_send(server, key):
    """An answer delayed by waiting in line: the deadline is at most send + TTL."""
    a, b = Client(server.url), Client(server.url)
    try:
        held = a.acquire(key, ttl=1)
        calls = record_calls(b)
        threading.Timer(0.2, held.release).start()
        lease = b.acquire(key, ttl=1, wait=1)
        (method, sent, answered, status), *renewal = calls
        assert method == "Acquire" and answered - sent > 0.15
        if renewal:
            # The grant came back so late (a loaded machine) that the
            # client renewed before returning: it counts from that send.
            (method, sent, _, _), = renewal
            assert method == "Renew"
        else:
            assert lease.deadline < answered + 0.9
        # Counted from the send, not from the answer (the mutant).
        window = 1.0 * (1 - 0.001) - 0.010
        assert sent + window - 0.005 <= lease.deadline <= sent + window
    finally:
        a.close()
        b.close()


def test_mutant_arms_the_deadline_from_the_answer(server, key):
    """The torture harness's mutant: the same wait leaves the deadline past send + TTL."""
    a, b = Client(server.url), Client(server.url)
    try:
        b._session.proof_time = lambda sent: b._session.loop.time()  # the answer's time, not the send's
        held = a.acquire(key, ttl=1)
        calls = record_calls(b)
        threading.Timer(0.2, held.release).start()
        lease = b.acquire(key, ttl=1, wait=1)
        (_, sent, _, _) = calls[0]
        assert lease.deadline > sent + 1.0  # beyond the server's expiry: unsafe
    finally:
        a.close()
        b.close()


def test_waited_acquire_longer_than_the_ttl_renews_once(server, key):
    a, b = Client(server.url), Client(server.url)
    try:
        a.acquire(key, ttl=1).orphan()  # expires on the server after 1s
        calls = record_calls(b)
        lease = b.acquire(key, ttl=1, wait=3)
        assert [c[0] for c in calls] == ["Acquire", "Renew"]
        renew_sent = calls[1][1]
        assert renew_sent + 0.989 - 0.005 <= lease.deadline <= renew_sent + 0.989
        lease.check()
    finally:
        a.close()
        b.close()


def test_refused_renewal_loses_at_once_and_never_comes_back(client, server, key):
    lease = client.acquire(key, ttl=3)
    causes = []
    lease.on_lost(causes.append)
    client.release(key, lease.lease_id)  # someone with the ID ends it on the server
    assert lease.lost.wait(3), "not lost after a refused renewal"
    with pytest.raises(fenced.LeaseLost, match="renewal refused"):
        lease.check()
    deadline = time.monotonic() + 3
    while not causes and time.monotonic() < deadline:  # on the callback thread
        time.sleep(0.01)
    assert isinstance(causes[0], fenced.LeaseLost)
    later = []
    lease.on_lost(later.append)  # registered after the loss: called at once
    assert later == causes
    other = client.acquire(key)
    assert other.token > lease.token
    with pytest.raises(fenced.LeaseLost):
        lease.check()
    other.release()


class _ClockLoop(asyncio.SelectorEventLoop):
    """An event loop whose monotonic clock moves only when the test moves it."""

    now = 1000.0

    def time(self) -> float:
        return self.now


def test_renewal_applied_after_the_deadline_never_brings_the_lease_back():
    """A renewal answered before the local deadline but applied after it (the loop was
    late, the expiry timer has not run): check() raises LeaseLost, and the lease must
    stay lost, never held again with a deadline moved on (docs/client-algorithm.md, 1.2)."""
    loop = _ClockLoop()
    session = _core.Session(_core.Config(endpoints=["http://127.0.0.1:1"]), loop)
    window = 3 * (1 - 0.001) - 0.010
    core = _core.LeaseCore(session, _core.LeaseInfo("k", "me", 7, 3.0, 3.0, "id"), 1.0, window)

    class Stub:  # the fenced.Client a Lease reports to
        def _call_soon(self, fn):
            loop.call_soon(fn)

    lease = fenced.client.Lease(Stub(), core)
    seen = []

    async def renew(key, lease_id, timeout):
        loop.now = 1000 + window + 0.001  # answered before the deadline, applied just after it
        try:
            lease.check()
        except fenced.LeaseLost as e:
            seen.append(e)
        return {}

    async def release(key, lease_id, timeout):
        seen.append("released")

    session.renew, session.release = renew, release
    try:
        core.start(loop.now)
        before = lease.deadline
        loop.now = 1000 + window - 0.5  # the renewal is sent before the deadline
        loop.run_until_complete(core._renew())
        loop.run_until_complete(asyncio.sleep(0))  # the loop's callbacks, the expiry check included
        assert isinstance(seen[0], fenced.LeaseLost)
        with pytest.raises(fenced.LeaseLost):
            lease.check()
        assert lease.lost.is_set() and lease.deadline == before
        assert seen[1:] == ["released"]
    finally:
        loop.close()


def test_paused_server_loses_the_lease_at_the_local_deadline(own_server, key):
    c = Client(own_server.url, ttl=1, request_timeout=0.3)
    try:
        lease = c.acquire(key)
        calls = record_calls(c)
        time.sleep(0.6)  # a renewal or two go through first
        own_server.pause()
        paused = time.monotonic()
        assert lease.lost.wait(2)
        with pytest.raises(fenced.LeaseLost, match="local deadline passed"):
            lease.check()
        ok_renewals = [s for m, s, _, st in calls if m == "Renew" and st == 200]
        assert ok_renewals, "no renewal succeeded before the pause"
        # The deadline it was lost at counts from the last successful renewal's
        # send (taken just before the recorded one), so it passed before the
        # server's TTL, which starts when the server handles the renewal.
        assert lease.deadline <= max(ok_renewals) + 0.989
        assert time.monotonic() - paused < 1.5
        own_server.resume()
        time.sleep(1)
        with pytest.raises(fenced.LeaseLost):
            lease.check()
    finally:
        own_server.resume()
        c.close()


def test_reported_loss_releases_in_the_background(client, key):
    lease = client.acquire(key, ttl=5)
    lease.report_lost(fenced.StaleToken(key, lease.token, lease.token + 1))
    assert lease.lost.is_set()
    deadline = time.monotonic() + 3
    while client.get(key).lease is not None:
        assert time.monotonic() < deadline, "the best-effort release did not free the key"
        time.sleep(0.02)


def test_failover_from_a_refusing_endpoint(server, key):
    dead = f"http://127.0.0.1:{_closed_port()}"
    c = Client([dead, server.url])
    try:
        with c.acquire(key) as lease:
            assert lease.token > 0
            assert c.get(key).lease.token == lease.token
    finally:
        c.close()


def test_single_endpoint_does_not_retry(key):
    c = Client(f"http://127.0.0.1:{_closed_port()}")
    try:
        with pytest.raises(fenced.Unavailable) as e:
            c.acquire(key)
        assert e.value.may_have_arrived is False
    finally:
        c.close()


def test_unanswered_acquire_then_own_owner_is_uncertain(server, key):
    """An endpoint that forwards the Acquire and drops the answer: the retry finds the
    caller's own grant, which must be reported as uncertain, never as held."""
    port = _dropping_proxy(server.port)
    c = Client([f"http://127.0.0.1:{port}", server.url], failover_timeout=2)
    try:
        with pytest.raises(fenced.AcquireUncertain) as e:
            c.acquire(key, owner="me")
        assert e.value.owner == "me" and 0 < e.value.remaining <= 10
        assert not isinstance(e.value, fenced.Held)
    finally:
        c.close()


def test_release_whose_answer_was_lost_is_done(server, key):
    """A Release that fenced applied but whose answer was lost, retried at the next
    endpoint, which answers not_found: the lease is gone (released or expired), so
    release returns normally, never NotHeld. A Release answered not_found is NotHeld."""
    proxy = _CuttingProxy(server.port, b"/Release")
    c = Client([proxy.listen(), proxy.listen()], failover_timeout=2)
    try:
        lease = c.acquire(key, ttl=5)
        lease.release()
        assert proxy.cut == 1, "the proxy dropped no answer"
        with pytest.raises(fenced.LeaseReleased):
            lease.check()
        assert c.get(key).lease is None
        with pytest.raises(fenced.NotHeld):
            c.release(key, lease.lease_id)
    finally:
        c.close()


def test_watch_sees_transitions_in_order_and_resumes(client, key):
    start = client.list(key).revision  # List, then Watch from its revision: no gap
    with client.watch(key, after_revision=start) as w:
        lease = client.acquire(key)
        lease.release()
        events = [next(w), next(w)]
    assert [(e.type, e.lease.token) for e in events] == [("ACQUIRED", lease.token), ("RELEASED", lease.token)]
    assert events[0].revision < events[1].revision
    with client.watch(key, after_revision=events[0].revision) as w:
        again = next(w)
    assert (again.type, again.revision) == ("RELEASED", events[1].revision)


def test_watch_error_ends_the_stream(client):
    with pytest.raises(fenced.InvalidArgument):
        with client.watch("bad\x01prefix") as w:
            next(w)


def test_rejections_round_trip(client, key):
    n = client.report_rejections([{"scope": key, "presentedToken": "3", "highestToken": "9",
                                   "owner": "w", "resource": "py-test", "count": 2}])
    assert n == 2  # the count
    rejections, total = client.list_rejections(key)
    assert total >= 1 and rejections[0]["scope"] == key


def test_lease_held_detail_decodes():
    h = _wire.decode_lease_held("CghvcmRlcnMvNxIBQRgEINPUAw")
    assert h == {"key": "orders/7", "owner": "A", "token": 4, "remainingMs": 59987}


# ---------------------------------------------------------------- helpers


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _dropping_proxy(target_port: int) -> int:
    """A listener that sends each request on to fenced and closes without answering."""
    ln = socket.socket()
    ln.bind(("127.0.0.1", 0))
    ln.listen()

    def serve():
        while True:
            try:
                conn, _ = ln.accept()
            except OSError:
                return
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            head, body = data.split(b"\r\n\r\n", 1)
            lengths = [l.split(b":")[1] for l in head.split(b"\r\n") if l.lower().startswith(b"content-length")]
            n = int(lengths[0]) if lengths else 0
            while len(body) < n:
                body += conn.recv(65536)
            with socket.create_connection(("127.0.0.1", target_port)) as up:
                up.sendall(head + b"\r\n\r\n" + body)
                up.recv(65536)  # the answer, dropped
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    return ln.getsockname()[1]


class _CuttingProxy:
    """Listeners that pass each request on to fenced and its answer back, except the
    first answer to a call whose path ends with method: fenced applies that call and
    the connection is closed without an answer, as when a node dies after a commit.
    Every listener shares that one cut, so it happens at whichever endpoint is used."""

    def __init__(self, target_port: int, method: bytes):
        self.target_port, self.method, self.cut = target_port, method, 0
        self.mu = threading.Lock()

    def listen(self) -> str:
        ln = socket.socket()
        ln.bind(("127.0.0.1", 0))
        ln.listen()
        threading.Thread(target=self._serve, args=(ln,), daemon=True).start()
        return f"http://127.0.0.1:{ln.getsockname()[1]}"

    def _serve(self, ln):
        while True:
            conn, _ = ln.accept()
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn):
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                got = conn.recv(65536)
                if not got:
                    return
                data += got
            head, body = data.split(b"\r\n\r\n", 1)
            lines = head.split(b"\r\n")
            lengths = [l.split(b":")[1] for l in lines if l.lower().startswith(b"content-length")]
            while len(body) < (int(lengths[0]) if lengths else 0):
                body += conn.recv(65536)
            # One request per connection: fenced closes after answering, and
            # its answer tells the client to close too.
            lines = [l for l in lines if not l.lower().startswith(b"connection:")] + [b"Connection: close"]
            answer = b""
            with socket.create_connection(("127.0.0.1", self.target_port)) as up:
                up.sendall(b"\r\n".join(lines) + b"\r\n\r\n" + body)
                while got := up.recv(65536):
                    answer += got
            with self.mu:
                drop = lines[0].split(b" ")[1].endswith(self.method) and self.cut == 0
                self.cut += drop
            if not drop:
                conn.sendall(answer)


def test_watch_yields_resync_and_maps_the_end_of_stream_error():
    """A server that answers a Watch with events, a RESYNC and an error at the end of the stream."""
    import http.server
    import json
    import struct

    def env(flags, msg):
        b = json.dumps(msg).encode()
        return bytes([flags]) + struct.pack(">I", len(b)) + b

    frames = [
        env(0, {"event": {"type": "ACQUIRED", "lease": {"key": "k", "owner": "o", "token": "7"}, "revision": "7"}}),
        env(0, {"event": {"type": "RESYNC"}}),
        env(0, {"event": {"type": "EXPIRED", "lease": {"key": "k", "owner": "o", "token": "7"}, "revision": "9"}}),
        env(2, {"error": {"code": "permission_denied", "message": "no watch on k"}}),
    ]

    class H(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.send_header("Content-Type", "application/connect+json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for f in frames:  # split across chunks, as a real server may
                for part in (f[:3], f[3:]):
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
            self.wfile.write(b"0\r\n\r\n")

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    c = Client(f"http://127.0.0.1:{srv.server_address[1]}")
    try:
        got = []
        with pytest.raises(fenced.PermissionDenied):
            for ev in c.watch("k"):
                got.append((ev.type, ev.revision, ev.lease.token if ev.lease else None))
        assert got == [("ACQUIRED", 7, 7), ("RESYNC", 0, None), ("EXPIRED", 9, 7)]
    finally:
        c.close()
        srv.shutdown()


@pytest.mark.parametrize("second", ["acquire", "get"])
def test_request_lost_with_its_node_may_have_arrived(second):
    """A node that reads a request on a kept-alive connection and dies (refusing new
    connections after): the call may have taken effect, never "refused" (it was seen
    wrongly so in a torture history: an Acquire granted, recorded as refused)."""
    ln = socket.socket()
    ln.bind(("127.0.0.1", 0))
    ln.listen()

    def serve():
        conn, _ = ln.accept()
        for i in range(2):
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            head, body = data.split(b"\r\n\r\n", 1)
            n = int([l.split(b":")[1] for l in head.split(b"\r\n") if l.lower().startswith(b"content-length")][0])
            while len(body) < n:
                body += conn.recv(65536)
            if i == 0:
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
        ln.close()  # the node dies with the second request read: new connections are refused
        conn.close()

    threading.Thread(target=serve, daemon=True).start()
    c = Client(f"http://127.0.0.1:{ln.getsockname()[1]}")
    try:
        assert c.get("k").lease is None
        with pytest.raises(fenced.Unavailable) as e:
            c.acquire("k") if second == "acquire" else c.get("k")
        assert e.value.may_have_arrived is True
    finally:
        c.close()


def _cluster_id(url: str) -> str:
    import json
    import urllib.request

    with urllib.request.urlopen(url + "/v1/role", timeout=5) as r:
        return json.load(r)["clusterId"]


def test_pins_the_cluster_of_the_first_answer(bindir, own_server, key, caplog):
    """Endpoints of two clusters: the client keeps to the first that answered; once its
    node is gone, calls fail instead of answering with the other cluster's leases."""
    from conftest import Server

    a, b = own_server, Server(bindir)
    other = Client(b.url, owner="b")
    c = Client([a.url, b.url], failover_timeout=0.3)
    try:
        id_a, id_b = _cluster_id(a.url), _cluster_id(b.url)
        assert id_a and id_b and id_a != id_b
        held = other.acquire(key)
        lease = c.acquire(key)  # at a, the first endpoint
        lease.release()
        a.stop()
        for _ in range(3):
            with pytest.raises(fenced.Unavailable):
                got = c.get(key)
                pytest.fail(f"answered by the other cluster: {got}")
            with pytest.raises(fenced.Unavailable) as e:
                c.acquire(key + "/2")
            assert not isinstance(e.value, fenced.AcquireUncertain)
        logged = [r.getMessage() for r in caplog.records if "another cluster" in r.getMessage()]
        assert len(logged) == 1 and all(s in logged[0] for s in (b.url, id_a, id_b)), logged
        held.release()
    finally:
        c.close()
        other.close()
        b.stop()


def test_cluster_id_pinned_up_front(server, own_server, key):
    """Config.cluster_id: an endpoint of another cluster is never used, by unary calls or
    Watch; an Acquire it answered is not granted here (the other cluster granted it there)."""
    id_a, id_b = _cluster_id(server.url), _cluster_id(own_server.url)
    c = Client(own_server.url, cluster_id=id_a.upper())
    try:
        with pytest.raises(fenced.ClusterMismatch) as e:
            c.acquire(key)
        assert (e.value.endpoint, e.value.pinned, e.value.got) == (own_server.url, id_a, id_b)
        assert isinstance(e.value, fenced.Unavailable) and not isinstance(e.value, fenced.AcquireUncertain)
        with pytest.raises(fenced.ClusterMismatch):
            c.get(key)
        with pytest.raises(fenced.ClusterMismatch):
            for ev in c.watch(key, after_revision=1):  # own_server replays the grant above
                pytest.fail(f"watch yielded an event of another cluster: {ev}")
    finally:
        c.close()
    with pytest.raises(fenced.InvalidArgument):
        Client(server.url, cluster_id="not hex")


def test_on_lost_callback_may_release_the_lease(client, key):
    """A callback that calls release() (or any client method) must not deadlock the
    client: callbacks run on a thread of their own, not on the renewal loop."""
    lease = client.acquire(key, ttl=3)
    done = threading.Event()
    outcome = []

    def cb(cause):
        try:
            lease.release()  # already released in the background: NotHeld, or done
            outcome.append("released")
        except fenced.FencedError as e:
            outcome.append(e)
        outcome.append(client.get(key).lease)
        done.set()

    lease.on_lost(cb)
    client.release(key, lease.lease_id)  # the next renewal is refused: lost
    assert done.wait(5), "an on_lost callback that calls release() deadlocked the client"
    assert outcome[0] == "released" or isinstance(outcome[0], fenced.NotHeld)
    assert outcome[1] is None
    again = client.acquire(key)  # the client still serves calls
    again.release()


def test_configuration_errors_are_invalid_argument():
    """Every bad setting is refused before any request, as InvalidArgument (a ValueError too)."""
    for kw in ({"ttl": 0.01}, {"clock_drift": 0.5}, {"endpoints": ["a", "a"]}, {"cluster_id": "xyz"},
               {"token": "a\r\nb"}, {"bogus": 1}, {"cert_file": "c.pem"}):
        with pytest.raises(fenced.InvalidArgument, match="client config"):
            Client(**kw)
        with pytest.raises(ValueError):
            aio.Client(**kw)
    with pytest.raises(fenced.InvalidArgument):
        Client(config=fenced.Config(), ttl=3)
    cfg = fenced.Config()
    Client("http://127.0.0.1:1", config=cfg).close()
    assert cfg.endpoints == ["http://127.0.0.1:7420"]  # the caller's Config is not changed
    from fenced.report import Reporter
    from fenced.sign import Verifier

    with pytest.raises(fenced.InvalidArgument):
        Reporter(None, resource="")
    with pytest.raises(fenced.InvalidArgument):
        Verifier.from_key_set(b"not json")
