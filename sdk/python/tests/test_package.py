"""pyproject.toml builds a wheel and an sdist with no network (setuptools, no isolation)."""

import os
import shutil
import subprocess
import sys
import zipfile

import conftest


def test_builds_offline(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(conftest.SDK, src, ignore=shutil.ignore_patterns("__pycache__", ".hypothesis", ".pytest_cache"))
    dist = tmp_path / "dist"
    code = ("import sys; from setuptools import build_meta as b; "
            "print(b.build_wheel(sys.argv[1])); print(b.build_sdist(sys.argv[1]))")
    out = subprocess.run([sys.executable, "-c", code, str(dist)], cwd=src, capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, PIP_NO_INDEX="1"))
    assert out.returncode == 0, out.stderr[-2000:]
    wheel = next(w for w in out.stdout.split() if w.endswith(".whl"))
    sdist = next(w for w in out.stdout.split() if w.endswith(".tar.gz"))
    names = zipfile.ZipFile(dist / wheel).namelist()
    for module in ("fenced/client.py", "fenced/aio.py", "fenced/guards/postgres.py", "fenced/guards/postgres_async.py",
                   "fenced/guards/redis.py", "fenced/guards/messages.py", "fenced/guards/amqp.py", "fenced/_wire.py",
                   "fenced/py.typed"):
        assert module in names
    # Test harness stays in the repository: no torture worker, no mutant switch.
    assert not [n for n in names if "torture" in n], names
    for n in names:
        if n.endswith(".py"):
            assert b"FENCED_TORTURE_MUTANT" not in zipfile.ZipFile(dist / wheel).read(n), n
    assert sdist.endswith(".tar.gz")
