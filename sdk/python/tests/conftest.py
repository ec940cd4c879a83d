"""Fixtures: a real fenced built from this repository, the machine's PostgreSQL, Redis and RabbitMQ.

PostgreSQL, Redis and RabbitMQ come from FENCED_TEST_POSTGRES (a libpq URL),
FENCED_TEST_REDIS (host:port) and FENCED_TEST_AMQP (an amqp:// URL),
defaulting to the local services. A missing service skips its tests, and
fails them under FENCED_REQUIRE_SERVICES=1.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SDK = os.path.dirname(HERE)
REPO = os.path.dirname(os.path.dirname(SDK))
sys.path.insert(0, SDK)

POSTGRES = os.environ.get("FENCED_TEST_POSTGRES", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
REDIS = os.environ.get("FENCED_TEST_REDIS", "127.0.0.1:6379")
AMQP = os.environ.get("FENCED_TEST_AMQP", "amqp://guest:guest@127.0.0.1:5672/")
REQUIRED = os.environ.get("FENCED_REQUIRE_SERVICES") == "1"


def unavailable(what: str, err: BaseException):
    msg = f"{what} is not available ({err}); set FENCED_TEST_POSTGRES / FENCED_TEST_REDIS / FENCED_TEST_AMQP"
    if REQUIRED:
        pytest.fail(msg + " (FENCED_REQUIRE_SERVICES=1)")
    pytest.skip(msg)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def bindir(tmp_path_factory):
    d = tmp_path_factory.mktemp("bin")
    if not shutil.which("go"):
        pytest.fail("the tests build fenced from the repository and need the go command")
    for pkg, name in (("./cmd/fenced", "fenced"), ("./internal/goguard", "goguard")):
        subprocess.run(["go", "build", "-o", str(d / name), pkg], cwd=REPO, check=True, timeout=600)
    return d


class Server:
    """One fenced node (or the reference store) in a temporary directory."""

    def __init__(self, bindir, *args, store=False):
        self.dir = tempfile.mkdtemp(prefix="fenced-py-")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [str(bindir / "fenced")]
        if store:
            cmd += ["store", "--data-dir", self.dir, "--listen", f"127.0.0.1:{self.port}"]
        else:
            cmd += ["--data-dir", self.dir, "--listen", f"127.0.0.1:{self.port}",
                    "--raft-listen", f"127.0.0.1:{free_port()}", *args]
        self.log = open(os.path.join(self.dir, "log"), "wb")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        health = self.url + ("/healthz" if not store else "/v1/objects/none")
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(health, timeout=1)
                break
            except urllib.error.HTTPError as e:
                if store and e.code == 404:
                    break
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"fenced did not come up: {open(self.log.name).read()[-2000:]}")
            time.sleep(0.05)

    def pause(self):
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self):
        self.proc.send_signal(signal.SIGCONT)

    def stop(self):
        self.resume()
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def server(bindir):
    s = Server(bindir)
    yield s
    s.stop()


@pytest.fixture
def own_server(bindir):
    """A node of the test's own, which it may pause."""
    s = Server(bindir)
    yield s
    s.stop()


@pytest.fixture(scope="session")
def store(bindir):
    s = Server(bindir, store=True)
    yield s
    s.stop()


@pytest.fixture
def key():
    return "py/" + uuid.uuid4().hex[:12]


@pytest.fixture
def client(server):
    from fenced import Client

    c = Client(server.url, ttl=2)
    yield c
    c.close()


@pytest.fixture(params=["psycopg", "psycopg2"])
def pg(request):
    """A connection of each driver, and a fresh scope table name."""
    try:
        if request.param == "psycopg":
            import psycopg

            conn = psycopg.connect(POSTGRES, connect_timeout=3)
        else:
            import psycopg2

            conn = psycopg2.connect(POSTGRES, connect_timeout=3)
    except Exception as e:  # ImportError or a connection failure
        unavailable(f"PostgreSQL via {request.param}", e)
    yield conn
    conn.rollback()
    conn.close()


@pytest.fixture
def pg_table(pg):
    name = "py_fence_" + uuid.uuid4().hex[:10]
    yield name
    pg.rollback()
    with pg.cursor() as cur:
        cur.execute(f'DROP TABLE IF EXISTS "{name}"')
    pg.commit()


@pytest.fixture
def redis_client():
    try:
        import redis

        host, port = REDIS.rsplit(":", 1)
        r = redis.Redis(host=host, port=int(port), socket_timeout=3)
        r.ping()
    except Exception as e:
        unavailable("Redis", e)
    yield r
    r.close()


@pytest.fixture
def amqp_connect():
    """connect() opens a pika BlockingConnection to the test RabbitMQ (each one a process
    of its own to the broker); those still open are closed after the test."""
    conns = []

    def connect():
        import pika

        params = pika.URLParameters(AMQP)
        # No heartbeats: a connection the test leaves idle (a stalled consumer) must stay up.
        params.heartbeat, params.socket_timeout, params.connection_attempts = 0, 5, 1
        c = pika.BlockingConnection(params)
        conns.append(c)
        return c

    try:
        connect()
    except Exception as e:  # ImportError or a connection failure
        unavailable("RabbitMQ via pika", e)
    yield connect
    for c in conns:
        if c.is_open:
            c.close()
