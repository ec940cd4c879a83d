"""The example runs as a newcomer would run it, against a real fenced and PostgreSQL."""

import os
import subprocess
import sys

import conftest
import fenced


def test_paused_worker_example(server):
    try:
        import psycopg

        db = psycopg.connect(conftest.POSTGRES, connect_timeout=3)
    except Exception as e:
        conftest.unavailable("PostgreSQL via psycopg", e)
    # The example starts from a database new to its scope, as a newcomer's
    # is: the tokens of an earlier run's fenced would outrank this one's.
    with db:
        if db.execute("SELECT to_regclass('fence_scopes')").fetchone()[0] is not None:
            db.execute("DELETE FROM fence_scopes WHERE scope = 'jobs/report'")
    db.close()
    env = dict(os.environ, FENCED_ENDPOINTS=server.url, DATABASE_URL=conftest.POSTGRES,
               PYTHONPATH=conftest.SDK)
    path = os.path.join(conftest.SDK, "examples", "paused_worker.py")
    out = subprocess.run([sys.executable, path], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("B wrote with token ")
    assert lines[1].startswith("A's late write refused: stale fencing token for scope 'jobs/report'")
    assert lines[2] == "the report's author: B"


def test_job_queue_recipe(server, key):
    """docs/job-queue.md: A claims and works, pauses past its TTL; B takes over and claims;
    A's result is refused although B has not finished; B's result lands. The doc's
    Python block is the example's code."""
    import importlib.util
    import re
    import uuid

    from fenced import Client

    path = os.path.join(conftest.SDK, "examples", "job_queue.py")
    doc = open(os.path.join(conftest.REPO, "docs", "job-queue.md")).read()
    block = re.search(r"<!-- worked example: sdk/python/examples/job_queue.py -->\n```python\n(.*?)```", doc, re.S)
    assert block and block.group(1) == open(path).read(), "docs/job-queue.md's Python block is not job_queue.py"
    try:
        import psycopg

        db = psycopg.connect(conftest.POSTGRES, connect_timeout=3)
    except Exception as e:
        conftest.unavailable("PostgreSQL via psycopg", e)
    spec = importlib.util.spec_from_file_location("job_queue", path)
    jq = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(jq)
    job = uuid.uuid4().int % 2**62
    client = Client(server.url)
    try:
        jq.migrate(db)
        with db.cursor() as cur:
            cur.execute("INSERT INTO jobs (id) VALUES (%s)", (job,))
        db.commit()
        a = client.acquire(f"jobs/{job}", ttl=1, owner="A")
        assert jq.claim(db, a, job)
        a.orphan()  # A pauses mid-work: no renewal goes out, it never looks at its lease
        seen = []

        def work_b(lease):
            # B has claimed the job (run_job did): A wakes up now, B still working, and finishes
            try:
                jq.finish(db, a, job, "A's result")
            except fenced.StaleToken as e:
                seen.append(e)
            return "B's result"

        assert jq.run_job(client, db, job, work_b) == "done"
        assert isinstance(seen[0], fenced.StaleToken)
        with db.cursor() as cur:
            cur.execute("SELECT state, claimed_by, result FROM jobs WHERE id = %s", (job,))
            assert cur.fetchone() == ("done", client.config.owner, "B's result")
        db.rollback()
        assert jq.run_job(client, db, job, lambda lease: "again") == "already done"
    finally:
        client.close()
        db.close()
