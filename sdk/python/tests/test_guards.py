"""The guards against the machine's PostgreSQL and Redis, and the HTTP helpers against `fenced store`."""

from __future__ import annotations

import asyncio
import io
import json
import threading
import urllib.error
import urllib.request
import uuid

import pytest

import conftest
import fenced
from fenced.guards import Decision
from fenced.guards.http import ASGIMiddleware, WSGIMiddleware, fencing_headers, parse_token, send, stale_from
from fenced.guards.memory import MemoryGuard
from fenced.guards.postgres import PostgresGuard, RowFence, create_table_sql
from fenced.guards.redis import RedisGuard
from fenced.report import Reporter


class FakeLease:
    def __init__(self, key, token, owner="w1", signature=""):
        self.key, self.token, self.owner, self.signature = key, token, owner, signature
        self.lost = []

    def report_lost(self, err):
        self.lost.append(err)


def scope():
    return "py-guard/" + uuid.uuid4().hex[:10]


# ---------------------------------------------------------------- PostgreSQL


def test_create_table_sql_is_go_s():
    assert create_table_sql() == ('CREATE TABLE IF NOT EXISTS "fence_scopes" (\n'
                                  "    scope          varchar(512) PRIMARY KEY,\n"
                                  "    highest_token  bigint NOT NULL CHECK (highest_token >= 0),\n"
                                  "    sequence_token bigint NOT NULL DEFAULT 0,\n"
                                  "    last_sequence  bigint NOT NULL DEFAULT 0\n)")
    with pytest.raises(fenced.InvalidArgument):
        PostgresGuard(table="x; drop table y")


def test_migrate_adds_the_sequence_columns_to_an_old_table(pg, pg_table):
    with pg.cursor() as cur:
        cur.execute(f'CREATE TABLE "{pg_table}" (scope varchar(512) PRIMARY KEY, '
                    "highest_token bigint NOT NULL CHECK (highest_token >= 0))")
        cur.execute(f'INSERT INTO "{pg_table}" VALUES (%s, 3)', ("old",))
    pg.commit()
    g = PostgresGuard(table=pg_table)
    g.migrate(pg)
    g.migrate(pg)  # again: nothing to do
    with pg.cursor() as cur:
        cur.execute(f'SELECT scope, highest_token, sequence_token, last_sequence FROM "{pg_table}"')
        assert cur.fetchall() == [("old", 3, 0, 0)]
    pg.rollback()
    g.do(pg, "old", 4, lambda cur: None)
    assert g.highest(pg, "old") == 4


def test_postgres_guard_accepts_equal_and_higher_refuses_lower(pg, pg_table):
    decisions = []
    g = PostgresGuard(table=pg_table, observer=decisions.append)
    g.migrate(pg)
    s = scope()
    with pg.cursor() as cur:
        cur.execute(f'CREATE TEMP TABLE writes_{pg_table} (token bigint)')
    pg.commit()

    def write(tok):
        return lambda cur: cur.execute(f"INSERT INTO writes_{pg_table} VALUES (%s)", (tok,))

    g.do(pg, s, 5, write(5), owner="a")
    g.do(pg, s, 5, write(5))
    g.do(pg, s, 7, write(7))
    with pytest.raises(fenced.StaleToken) as e:
        g.do(pg, s, 6, write(6), owner="b")
    assert (e.value.scope, e.value.presented, e.value.highest) == (s, 6, 7)
    assert g.highest(pg, s) == 7
    with pg.cursor() as cur:
        cur.execute(f"SELECT token FROM writes_{pg_table} ORDER BY 1")
        assert [r[0] for r in cur.fetchall()] == [5, 5, 7]  # the stale write rolled back
    pg.rollback()
    assert decisions[0] == Decision(s, 5, 0, True, "a")
    assert decisions[-1] == Decision(s, 6, 7, False, "b")
    for bad, err in ((0, fenced.NoToken), (2**63, fenced.TokenOutOfRange)):
        with pytest.raises(err):
            g.do(pg, s, bad, write(0))
    with pytest.raises(fenced.InvalidScope):
        g.do(pg, "bad\x00scope", 9, write(9))
    assert g.highest(pg, s) == 7


def test_postgres_failed_write_records_nothing(pg, pg_table):
    g = PostgresGuard(table=pg_table)
    g.migrate(pg)
    s = scope()

    def boom(cur):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        g.do(pg, s, 9, boom)
    assert g.highest(pg, s) == 0


def test_postgres_check_in_the_callers_transaction(pg, pg_table):
    g = PostgresGuard(table=pg_table)
    g.migrate(pg)
    s = scope()
    with pg.cursor() as cur:
        g.check(cur, s, 4)
    pg.rollback()  # the caller rolls back: the token is not recorded either
    assert g.highest(pg, s) == 0
    with pg.cursor() as cur:
        g.check(cur, s, 4)
    pg.commit()
    assert g.highest(pg, s) == 4


def test_postgres_do_lease_loses_the_lease(pg, pg_table):
    g = PostgresGuard(table=pg_table)
    g.migrate(pg)
    s = scope()
    g.do(pg, s, 10, lambda cur: None)
    lease = FakeLease(s, 9)
    with pytest.raises(fenced.StaleToken):
        g.do_lease(pg, lease, lambda cur: None)
    assert isinstance(lease.lost[0], fenced.StaleToken)


def test_row_fence(pg):
    table = "py_rows_" + uuid.uuid4().hex[:8]
    rf = RowFence(table)
    with pg.cursor() as cur:
        cur.execute(f'CREATE TABLE "{table}" (id int PRIMARY KEY, status text)')
        cur.execute(rf.add_column_sql())
        cur.execute(f'INSERT INTO "{table}" (id, status) VALUES (1, %s)', ("new",))
        rf.update(cur, 1, 5, status="paid")
        rf.update(cur, 1, 5, status="paid again")
        with pytest.raises(fenced.StaleToken) as e:
            rf.update(cur, 1, 4, status="stale")
        assert (e.value.scope, e.value.highest) == (f"{table}/1", 5)
        with pytest.raises(fenced.RowNotFound):
            rf.update(cur, 2, 9, status="x")
        cur.execute(f'SELECT status, fence_token FROM "{table}"')
        assert cur.fetchall() == [("paid again", 5)]
        cur.execute(f'DROP TABLE "{table}"')
    pg.commit()


def test_postgres_guard_serializes_one_scope(pg, pg_table):
    """Two connections racing on one scope: the lower token never commits after the higher."""
    g = PostgresGuard(table=pg_table)
    g.migrate(pg)
    s = scope()
    import conftest

    if "psycopg2" in type(pg).__module__:
        import psycopg2

        conn2 = psycopg2.connect(conftest.POSTGRES)
    else:
        import psycopg

        conn2 = psycopg.connect(conftest.POSTGRES)
    entered, go = threading.Event(), threading.Event()

    def slow(cur):
        entered.set()
        go.wait(5)

    t = threading.Thread(target=g.do, args=(pg, s, 8, slow))
    t.start()
    entered.wait(5)
    result = []

    def low():
        try:
            g.do(conn2, s, 7, lambda cur: None)
            result.append("accepted")
        except fenced.StaleToken:
            result.append("stale")

    t2 = threading.Thread(target=low)
    t2.start()
    t2.join(0.3)
    assert t2.is_alive(), "the second transaction did not wait for the scope's lock"
    go.set()
    t.join(5)
    t2.join(5)
    conn2.close()
    assert result == ["stale"]


# ---------------------------------------------------------------- Redis


def test_redis_guard(redis_client):
    decisions = []
    g = RedisGuard(redis_client, observer=decisions.append)
    s = scope()
    k = RedisGuard.key(s, "report")
    assert g.set(s, 5, k, "v5") in (b"OK", "OK")
    g.set(s, 5, k, "v5 again")
    with pytest.raises(fenced.StaleToken) as e:
        g.set(s, 4, k, "stale")
    assert e.value.highest == 5
    assert redis_client.get(k) == b"v5 again"
    assert redis_client.get(g.token_key(s)) == b"5"
    assert g.hset(s, 6, RedisGuard.key(s, "h"), {"a": "1", "b": "2"}) == 2
    assert g.delete(s, 7, k, RedisGuard.key(s, "h")) == 2
    assert g.highest(s) == 7
    assert g.eval(s, 18446744073709551615, "return ARGV[1] .. TOKEN", [], ["t="]) == b"t=18446744073709551615"
    with pytest.raises(fenced.StaleToken):
        g.set(s, 18446744073709551614, k, "x")  # compared as strings: all 64 bits count
    with pytest.raises(fenced.KeyOutsideScope):
        g.set(s, 9, "no-tag", "x")
    with pytest.raises(fenced.KeyOutsideScope):
        g.set(s, 9, g.token_key(s), "x")
    assert decisions[0] == Decision(s, 5, 0, True, "")
    lease = FakeLease(s, 3)
    with pytest.raises(fenced.StaleToken):
        g.lease(lease).set(k, "x")
    assert lease.lost
    redis_client.delete(g.token_key(s))


def test_redis_hash_tag():
    assert RedisGuard.key("a}b", "n") == "n{a%7Db}"
    assert RedisGuard.key("50%{x}", "n") == "n{50%25%7Bx%7D}"


# ---------------------------------------------------------------- memory and HTTP


def test_memory_guard():
    g = MemoryGuard()
    assert g.do("s", 3, lambda: "done") == "done"
    with pytest.raises(fenced.StaleToken):
        g.do("s", 2, lambda: pytest.fail("applied"))
    assert g.highest("s") == 3


def test_http_helper_against_the_reference_store(store, key):
    obj = f"{store.url}/v1/objects/{uuid.uuid4().hex}"
    new, old = FakeLease(key, 20), FakeLease(key, 19)
    status, _, _ = send(new, "PUT", obj, b"new")
    assert status in (200, 201, 204)
    with pytest.raises(fenced.StaleToken) as e:
        send(old, "PUT", obj, b"old")
    assert (e.value.presented, e.value.highest) == (19, 20)
    assert isinstance(old.lost[0], fenced.StaleToken)
    assert not new.lost


def test_requests_and_httpx_helpers(store, key):
    requests = pytest.importorskip("requests")
    httpx = pytest.importorskip("httpx")
    from fenced.guards.http import RequestsAuth, httpx_hooks

    obj = f"{store.url}/v1/objects/{uuid.uuid4().hex}"
    assert requests.put(obj, data=b"v", auth=RequestsAuth(FakeLease(key, 30))).ok
    old = FakeLease(key, 29)
    with pytest.raises(fenced.StaleToken):
        requests.put(obj, data=b"v", auth=RequestsAuth(old))
    assert old.lost
    with httpx.Client(event_hooks=httpx_hooks(FakeLease(key, 31))) as c:
        assert c.put(obj, content=b"v").is_success
    old = FakeLease(key, 30)
    with httpx.Client(event_hooks=httpx_hooks(old)) as c, pytest.raises(fenced.StaleToken):
        c.put(obj, content=b"v")
    assert old.lost


def test_stale_from_needs_the_problem_type():
    body = json.dumps({"type": "urn:fenced:problem:stale-token", "scope": "s", "presentedToken": 18446744073709551614,
                       "highestToken": 18446744073709551615}).encode()
    st = stale_from(409, "application/problem+json; charset=utf-8", body)
    assert (st.presented, st.highest) == (18446744073709551614, 18446744073709551615)
    assert stale_from(409, "application/json", body) is None
    assert stale_from(400, "application/problem+json", body) is None
    assert fencing_headers(FakeLease("s", 5, "o", "k.sig")) == {
        "Fencing-Scope": "s", "Fencing-Token": "5", "Fencing-Owner": "o", "Fencing-Token-Signature": "k.sig"}


def _wsgi(app, method="PUT", **headers):
    environ = {"REQUEST_METHOD": method, "wsgi.input": io.BytesIO(b"")}
    for k, v in headers.items():
        environ["HTTP_" + k.upper()] = v
    out = {}

    def start_response(status, hdrs, exc_info=None):
        out["status"], out["headers"] = status, dict(hdrs)

    body = b"".join(app(environ, start_response))
    return int(out["status"].split()[0]), out["headers"], body


def test_parse_token_takes_canonical_decimal_only():
    assert [parse_token(s) for s in ("1", "10", "18446744073709551615")] == [1, 10, 2**64 - 1]
    with pytest.raises(fenced.NoToken):
        parse_token("")
    for bad in ("0", "00", "007", "018446744073709551615", "18446744073709551616", "9" * 5000,
                "+5", "-5", " 5", "5 ", "5\t", "1_000", "0x10", "1e3", "\u0663"):
        with pytest.raises(fenced.InvalidArgument, match="invalid fencing token"):
            parse_token(bad)


def test_wsgi_middleware():
    calls = []

    def app(environ, start_response):
        calls.append(environ.get("fenced.token"))
        status = "500 Internal Server Error" if environ.get("HTTP_FAIL") else "200 OK"
        start_response(status, [("Content-Type", "text/plain")])
        return [b"done"]

    g = MemoryGuard()
    mw = WSGIMiddleware(app, g)
    assert _wsgi(mw, FENCING_SCOPE="s", FENCING_TOKEN="5")[0] == 200
    status, hdrs, body = _wsgi(mw, FENCING_SCOPE="s", FENCING_TOKEN="4")
    p = json.loads(body)
    assert (status, hdrs["Content-Type"], p["type"], p["highestToken"]) == (
        409, "application/problem+json", "urn:fenced:problem:stale-token", 5)
    assert _wsgi(mw)[0] == 428
    assert _wsgi(mw, FENCING_SCOPE="s", FENCING_TOKEN="abc")[0] == 400
    assert _wsgi(mw, FENCING_SCOPE="s", FENCING_TOKEN="0")[0] == 400
    for bad in ("007", "+9", " 9 ", "9\t", "9\xa0", "1_0"):  # one spelling per token: nothing else is 9 or 10
        assert _wsgi(mw, FENCING_SCOPE="s", FENCING_TOKEN=bad)[0] == 400, bad
    assert _wsgi(mw, FENCING_SCOPE="s\x01", FENCING_TOKEN="9")[0] == 400
    assert _wsgi(mw, FENCING_TOKEN="9")[0] == 400
    assert _wsgi(mw, FENCING_SCOPE="s", FENCING_TOKEN="9", FAIL="1")[0] == 500
    assert g.highest("s") == 5  # a failed handler records nothing
    assert _wsgi(mw, "GET")[0] == 200  # safe methods are not checked
    assert calls == [5, 9, None]


def test_asgi_middleware():
    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 201, "headers": []})
        await send({"type": "http.response.body", "body": str(scope["fenced.token"]).encode()})

    mw = ASGIMiddleware(app, MemoryGuard())

    async def call(token):
        sent = []

        async def send(m):
            sent.append(m)

        scope = {"type": "http", "method": "POST",
                 "headers": [(b"fencing-scope", b"s"), (b"fencing-token", token.encode())]}
        await mw(scope, None, send)
        return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])

    async def main():
        assert await call("7") == (201, b"7")
        status, body = await call("6")
        assert status == 409 and json.loads(body)["presentedToken"] == 6
        # What the server hands over is the value; over HTTP/2 spaces may remain, and are refused.
        for bad in ("08", "+8", " 8 ", "8\t"):
            status, body = await call(bad)
            assert status == 400 and json.loads(body)["type"] == "urn:fenced:problem:invalid-token", bad

    asyncio.run(main())


def test_reporter_never_blocks_and_counts_everything():
    sent = []
    gate = threading.Event()

    class Slow:
        def report_rejections(self, batch, timeout=None):
            gate.wait(5)
            sent.extend(batch)
            return len(batch)

    r = Reporter(Slow(), "py-test", queue_size=2, flush_interval=0.01)
    for i in range(5):
        r(Decision("s", 1, 2 + i % 3, False, "o"))
    r(Decision("s", 5, 2, True, ""))  # acceptances are not reported
    gate.set()
    r.close()
    assert r.sent + r.dropped == 5 and r.pending == 0
    assert sum(b["count"] for b in sent) == r.sent


def test_wsgi_middleware_refuses_a_bad_signature_with_403():
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    from fenced.sign import Verifier, signed_message

    priv = Ed25519PrivateKey.generate()
    pub = priv.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    import base64

    sig = "k." + base64.urlsafe_b64encode(priv.sign(signed_message("k", "s", 5))).decode().rstrip("=")
    app = WSGIMiddleware(lambda env, sr: (sr("200 OK", []), [b"ok"])[1], MemoryGuard(verifier=Verifier({"k": (pub, None)})))
    assert _wsgi(app, FENCING_SCOPE="s", FENCING_TOKEN="5", FENCING_TOKEN_SIGNATURE=sig)[0] == 200
    status, _, body = _wsgi(app, FENCING_SCOPE="s", FENCING_TOKEN="6", FENCING_TOKEN_SIGNATURE=sig)
    assert status == 403 and json.loads(body)["type"] == "urn:fenced:problem:bad-signature"
    assert _wsgi(app, FENCING_SCOPE="s", FENCING_TOKEN="6")[0] == 403


def test_reporter_reaches_fenced(client, key):
    """A guard's rejection, reported through a real fenced, is listed with its owner and resource."""
    r = Reporter(client, "py-memory", flush_interval=0.05)
    g = MemoryGuard(observer=r)
    g.do(key, 8, lambda: None, owner="new")
    with pytest.raises(fenced.StaleToken):
        g.do(key, 7, lambda: None, owner="old")
    r.close()
    assert (r.sent, r.dropped) == (1, 0)
    rejections, _ = client.list_rejections(key)
    (rej,) = rejections
    assert (rej["scope"], rej["resource"], rej["presentedToken"], rej["highestToken"], rej["reportedOwner"]) == (
        key, "py-memory", "7", "8", "old")


def test_postgres_sequences(pg, pg_table):
    decisions = []
    g = PostgresGuard(table=pg_table, observer=decisions.append)
    g.migrate(pg)
    strict = PostgresGuard(table=pg_table, strict_sequences=True)
    s = scope()
    g.do(pg, s, 3, lambda cur: None, sequence=4)
    with pytest.raises(fenced.Duplicate) as e:
        g.do(pg, s, 3, lambda cur: pytest.fail("applied twice"), sequence=4)
    assert (e.value.sequence, e.value.last) == (4, 4)
    assert decisions[-1].duplicate and not decisions[-1].accepted
    with pytest.raises(fenced.SequenceGap):
        strict.do(pg, s, 3, lambda cur: None, sequence=6)
    strict.do(pg, s, 3, lambda cur: None, sequence=5)
    g.do(pg, s, 4, lambda cur: None)  # a new epoch without a sequence ends the old one's sequences
    g.do(pg, s, 4, lambda cur: None, sequence=1)
    with pytest.raises(fenced.InvalidSequence):
        g.do(pg, s, 4, lambda cur: None, sequence=2**63)
    lease = FakeLease(s, 4)
    with pytest.raises(fenced.Duplicate):
        g.do_lease(pg, lease, lambda cur: None, sequence=1)
    assert not lease.lost  # a duplicate does not lose the lease


def test_tx_guard_passes_the_sequence(pg, pg_table):
    """The WSGI middleware gives a guard's do() the request's sequence: TxGuard takes it
    (as MemoryGuard does), so a repeated write is a 409 duplicate, not a 503."""
    import importlib

    g = PostgresGuard(table=pg_table)
    g.migrate(pg)
    driver = importlib.import_module(type(pg).__module__.split(".")[0])  # psycopg or psycopg2
    writes = []

    def app(environ, start_response):
        from fenced.guards.postgres import current_cursor

        current_cursor().execute("SELECT 1")
        writes.append(environ["fenced.token"])
        start_response("204 No Content", [])
        return []

    mw = WSGIMiddleware(app, g.tx_guard(lambda: driver.connect(conftest.POSTGRES, connect_timeout=3)))
    s = scope()
    assert _wsgi(mw, FENCING_SCOPE=s, FENCING_TOKEN="5", FENCING_SEQUENCE="1")[0] == 204
    status, _, body = _wsgi(mw, FENCING_SCOPE=s, FENCING_TOKEN="5", FENCING_SEQUENCE="1")
    assert (status, json.loads(body)["type"]) == (409, "urn:fenced:problem:duplicate-write")
    assert _wsgi(mw, FENCING_SCOPE=s, FENCING_TOKEN="5", FENCING_SEQUENCE="2")[0] == 204
    assert writes == [5, 5] and g.highest(pg, s) == 5


def test_redis_sequences(redis_client):
    g = RedisGuard(redis_client, token_ttl=60)
    strict = RedisGuard(redis_client, token_ttl=60, strict_sequences=True)
    s = scope()
    k = RedisGuard.key(s, "v")
    g.set(s, 3, k, "a", sequence=18446744073709551615 >> 1)  # 2**63-1: the largest
    with pytest.raises(fenced.Duplicate):
        g.set(s, 3, k, "again", sequence=5)
    g.set(s, 4, k, "b", sequence=1)
    with pytest.raises(fenced.SequenceGap):
        strict.set(s, 4, k, "c", sequence=3)
    strict.set(s, 4, k, "c", sequence=2)
    g.set(s, 4, k, "unsequenced")  # same token, no sequence: accepted, the last sequence stays
    with pytest.raises(fenced.Duplicate):
        g.set(s, 4, k, "x", sequence=2)
    with pytest.raises(fenced.KeyOutsideScope):
        g.set(s, 5, g.sequence_key(s), "x")
    assert redis_client.get(k) == b"unsequenced"


def test_sequences_over_http_through_the_wsgi_middleware(key):
    """send(sequence=) to a WSGI service fenced by MemoryGuard: a duplicate is refused with
    409 duplicate-write, raised as Duplicate, and the lease is not lost."""
    import wsgiref.simple_server

    writes = []

    def app(environ, start_response):
        writes.append(environ["fenced.token"])
        start_response("204 No Content", [])
        return []

    class Quiet(wsgiref.simple_server.WSGIRequestHandler):
        def log_message(self, *a):
            pass

    srv = wsgiref.simple_server.make_server("127.0.0.1", 0, WSGIMiddleware(app, MemoryGuard(strict_sequences=True)),
                                            handler_class=Quiet)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_port}/x"
    lease = FakeLease(key, 5)
    try:
        assert send(lease, "PUT", url, b"1", sequence=1)[0] == 204
        with pytest.raises(fenced.Duplicate) as e:
            send(lease, "PUT", url, b"1 again", sequence=1)  # a retry after an unknown outcome
        assert (e.value.sequence, e.value.last, e.value.response.code) == (1, 1, 409)
        with pytest.raises(fenced.SequenceGap):
            send(lease, "PUT", url, b"3", sequence=3)
        assert send(lease, "PUT", url, b"2", sequence=2)[0] == 204
        # Canonical decimal only, as Fencing-Token (guard spec section 7): no leading zeros.
        for bad in ("0", "00", "003", str(2**63), "9" * 5000, "1,2", "+3"):
            status, _, body = send(lease, "PUT", url, b"x", headers={"Fencing-Sequence": bad})
            assert status == 400 and json.loads(body)["type"] == "urn:fenced:problem:invalid-sequence", bad
        assert send(lease, "PUT", url, b"3", headers={"Fencing-Sequence": "3"})[0] == 204
        req = urllib.request.Request(url, data=b"x", method="PUT", headers={"Fencing-Scope": key, "Fencing-Token": "9" * 5000})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(req, timeout=5)
        assert refused.value.code == 400 and json.loads(refused.value.read())["type"] == "urn:fenced:problem:invalid-token"
        assert not lease.lost and writes == [5, 5, 5]
    finally:
        srv.shutdown()
