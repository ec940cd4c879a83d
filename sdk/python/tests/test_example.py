"""The example runs as a newcomer would run it, against a real fenced and PostgreSQL."""

import os
import subprocess
import sys

import conftest


def test_paused_worker_example(server):
    try:
        import psycopg

        psycopg.connect(conftest.POSTGRES, connect_timeout=3).close()
    except Exception as e:
        conftest.unavailable("PostgreSQL via psycopg", e)
    env = dict(os.environ, FENCED_ENDPOINTS=server.url, DATABASE_URL=conftest.POSTGRES,
               PYTHONPATH=conftest.SDK)
    path = os.path.join(conftest.SDK, "examples", "paused_worker.py")
    out = subprocess.run([sys.executable, path], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("B wrote with token ")
    assert lines[1].startswith("A's late write refused: stale fencing token for scope 'jobs/report'")
    assert lines[2] == "the report's author: B"
