"""fencectl torture with Python workers (FENCED_LONG=1): no violations, and the mutant caught."""

import json
import os
import subprocess
import sys

import pytest

import conftest

WORKER = os.path.join(conftest.SDK, "torture", "worker.py")

pytestmark = pytest.mark.skipif(os.environ.get("FENCED_LONG") != "1", reason="long: runs with FENCED_LONG=1")


@pytest.fixture(scope="module")
def fencectl(tmp_path_factory):
    out = tmp_path_factory.mktemp("bin") / "fencectl"
    subprocess.run(["go", "build", "-o", str(out), "./cmd/fencectl"], cwd=conftest.REPO, check=True, timeout=600)
    return out


def torture(fencectl, tmp_path, mutant: bool):
    try:
        import psycopg

        psycopg.connect(conftest.POSTGRES, connect_timeout=3).close()
    except Exception as e:
        conftest.unavailable("PostgreSQL via psycopg", e)
    env = dict(os.environ, PYTHONPATH=conftest.SDK)
    env.pop("FENCED_TORTURE_MUTANT", None)
    if mutant:
        env["FENCED_TORTURE_MUTANT"] = "deadline-from-answer"
    out = tmp_path / "run"
    cmd = [str(fencectl), "torture", "--duration", "20s", "--out", str(out), "--postgres", conftest.POSTGRES,
           "--worker-cmd", f"{sys.executable} {WORKER}", "--worker-cmd-workers", "3"]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    summary = json.loads((out / "summary.json").read_text())
    return p, summary


def test_python_workers_pass(fencectl, tmp_path):
    p, s = torture(fencectl, tmp_path, mutant=False)
    assert p.returncode == 0, p.stdout[-3000:]
    assert s["violations"] == 0 and s["acquisitions"]["ok"] > 0
    assert s["violationsByChecker"]["client-deadline-conservative"] == 0


def test_deadline_from_answer_mutant_is_caught(fencectl, tmp_path):
    p, s = torture(fencectl, tmp_path, mutant=True)
    assert p.returncode == 3, p.stdout[-3000:]
    assert s["violationsByChecker"]["client-deadline-conservative"] > 0
