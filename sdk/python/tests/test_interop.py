"""A Go guard and a Python guard on one scope refuse each other's stale tokens."""

from __future__ import annotations

import hashlib
import json
import subprocess
import uuid

import pytest

import conftest
import fenced
from fenced.guards.postgres import PostgresGuard
from fenced.guards.redis import SET_BODY, RedisGuard, wrap


# The Go guards' default Redis prefix, which RedisGuard uses too.
PREFIX = "fence:"


def goguard(bindir, *args) -> str:
    """One write through a Go guard (internal/goguard): "ok", "stale HIGHEST" or "duplicate LAST".

    TOKEN is TOKEN or TOKEN:SEQUENCE."""
    out = subprocess.run([str(bindir / "goguard"), *map(str, args)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    if r.get("stale"):
        return f"stale {r['highest']}"
    if r.get("duplicate"):
        return f"duplicate {r['last']}"
    assert r == {"accepted": True}, r
    return "ok"


def test_postgres_go_and_python_share_the_scope_table(bindir, pg, pg_table):
    s = "interop/" + uuid.uuid4().hex[:8]
    py = PostgresGuard(table=pg_table)
    assert goguard(bindir, "pg", conftest.POSTGRES, pg_table, s, 10) == "ok"  # Go creates the table
    with pytest.raises(fenced.StaleToken) as e:
        py.do(pg, s, 9, lambda cur: None)  # Python refuses what Go fenced off
    assert e.value.highest == 10
    py.do(pg, s, 12, lambda cur: None)
    assert goguard(bindir, "pg", conftest.POSTGRES, pg_table, s, 11) == "stale 12"  # and the other way round
    assert goguard(bindir, "pg", conftest.POSTGRES, pg_table, s, 12) == "ok"
    assert py.highest(pg, s) == 12


def test_redis_go_and_python_share_the_script_and_keys(bindir, redis_client):
    s = "interop/" + uuid.uuid4().hex[:8] + "{x}"
    py = RedisGuard(redis_client)
    k = RedisGuard.key(s, "obj")
    addr = conftest.REDIS
    # Empty the script cache (every client falls back to EVAL), so that only
    # Go's call can put the script there.
    redis_client.script_flush()
    assert goguard(bindir, "redis", addr, PREFIX, s, 10, k, "go") == "ok"
    # Go loaded the very script Python runs: same text, same SHA-1.
    sha = hashlib.sha1(wrap(SET_BODY).encode()).hexdigest()
    assert redis_client.script_exists(sha) == [True]
    with pytest.raises(fenced.StaleToken) as e:
        py.set(s, 9, k, "py stale")
    assert e.value.highest == 10
    py.set(s, 12, k, "py")
    assert goguard(bindir, "redis", addr, PREFIX, s, 11, k, "go stale") == "stale 12"
    assert redis_client.get(k) == b"py"
    assert py.highest(s) == 12
    redis_client.delete(k, py.token_key(s))


def test_postgres_go_and_python_share_sequences(bindir, pg, pg_table):
    """Sequences (docs/guard-spec.md, section 7): each guard refuses the other's duplicates."""
    s = "interop-seq/" + uuid.uuid4().hex[:8]
    py = PostgresGuard(table=pg_table)
    py.migrate(pg)
    py.do(pg, s, 5, lambda cur: None, sequence=1)
    assert goguard(bindir, "pg", conftest.POSTGRES, pg_table, s, "5:1") == "duplicate 1"
    assert goguard(bindir, "pg", conftest.POSTGRES, pg_table, s, "5:2") == "ok"
    with pytest.raises(fenced.Duplicate) as e:
        py.do(pg, s, 5, lambda cur: pytest.fail("applied twice"), sequence=2)
    assert e.value.last == 2
    py.do(pg, s, 5, lambda cur: None, sequence=3)
    assert goguard(bindir, "pg", conftest.POSTGRES, pg_table, s, "6:1") == "ok"  # a new epoch: any sequence
    py.do(pg, s, 6, lambda cur: None)  # unsequenced, same token: accepted, last unchanged
    with pytest.raises(fenced.Duplicate):
        py.do(pg, s, 6, lambda cur: None, sequence=1)


def test_redis_go_and_python_share_sequences(bindir, redis_client):
    s = "interop-seq/" + uuid.uuid4().hex[:8]
    py = RedisGuard(redis_client)
    k = RedisGuard.key(s, "obj")
    addr = conftest.REDIS
    redis_client.script_flush()
    assert goguard(bindir, "redis", addr, PREFIX, s, "5:1", k, "go") == "ok"
    sha = hashlib.sha1(wrap(SET_BODY, sequenced=True).encode()).hexdigest()
    assert redis_client.script_exists(sha) == [True]  # the sequenced script, the same text
    with pytest.raises(fenced.Duplicate) as e:
        py.set(s, 5, k, "py", sequence=1)
    assert e.value.last == 1
    py.set(s, 5, k, "py", sequence=2)
    assert goguard(bindir, "redis", addr, PREFIX, s, "5:2", k, "go again") == "duplicate 2"
    assert redis_client.get(k) == b"py"
    redis_client.delete(k, py.token_key(s), py.sequence_key(s))
