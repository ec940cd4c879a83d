"""TLS, mTLS, bearer tokens and signed tokens against a fenced with security on."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
import shutil
import subprocess
import urllib.request
import uuid

import pytest

import conftest
import fenced
from fenced.guards.http import send


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    if not shutil.which("openssl"):
        pytest.fail("the security tests make their certificates with the openssl command")
    d = tmp_path_factory.mktemp("pki")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    openssl("req", "-x509", *ec, "-keyout", "ca-key.pem", "-out", "ca.pem", "-days", "2", "-subj", "/CN=test-ca", cwd=d)
    for name, ext in (("server", "subjectAltName=IP:127.0.0.1"), ("client", "subjectAltName=DNS:py-client")):
        openssl("req", *ec, "-keyout", f"{name}-key.pem", "-out", f"{name}.csr", "-subj", f"/CN=py-{name}", cwd=d)
        with open(d / f"{name}.ext", "w") as f:
            f.write(ext + "\n")
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca-key.pem", "-CAcreateserial",
                "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.ext", cwd=d)
    return d


@pytest.fixture(scope="module")
def secure(bindir, pki):
    secret = secrets.token_hex(32)
    auth = {"tokens": [{"principal": "billing", "sha256": hashlib.sha256(secret.encode()).hexdigest()}],
            "rules": [{"principal": "billing", "prefix": "billing/", "permissions": ["acquire", "renew", "read", "watch"]},
                      {"principal": "py-client", "prefix": "billing/", "permissions": ["acquire", "renew", "read"]}]}
    (pki / "auth.json").write_text(json.dumps(auth))
    keys = {"active": "k1", "keys": [{"kid": "k1", "seed": base64.b64encode(os.urandom(32)).decode()}]}
    (pki / "keys.json").write_text(json.dumps(keys))
    args = ["--cert-file", str(pki / "server.pem"), "--key-file", str(pki / "server-key.pem"),
            "--trusted-ca-file", str(pki / "ca.pem"), "--auth-file", str(pki / "auth.json"),
            "--signing-key-file", str(pki / "keys.json")]
    node = _start(bindir, args, pki)
    yield node, secret
    node.stop()


def _start(bindir, args, pki):
    import ssl
    import time

    port = conftest.free_port()
    d = pki / ("node-" + uuid.uuid4().hex[:6])
    log = open(str(d) + ".log", "wb")
    proc = subprocess.Popen([str(bindir / "fenced"), "--data-dir", str(d), "--listen", f"127.0.0.1:{port}",
                             "--raft-listen", f"127.0.0.1:{conftest.free_port()}", *args], stdout=log, stderr=log)
    ctx = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", timeout=1, context=ctx)
            break
        except Exception:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(open(log.name).read()[-2000:])
            time.sleep(0.05)

    class Node:
        url = f"https://127.0.0.1:{port}"

        def stop(self):
            proc.terminate()
            proc.wait(10)
            log.close()

    return Node()


def test_bearer_token_over_tls(secure, pki):
    node, secret = secure
    key = "billing/" + uuid.uuid4().hex[:8]
    with fenced.Client(node.url, ca_file=str(pki / "ca.pem"), token=secret) as c:
        with c.acquire(key, ttl=1) as lease:
            assert lease.signature.startswith("k1.")  # signed tokens are carried along
            assert c.get(key).lease.token == lease.token
        with pytest.raises(fenced.PermissionDenied):
            c.acquire("other/" + uuid.uuid4().hex[:8])
    with fenced.Client(node.url, ca_file=str(pki / "ca.pem"), token="wrong" * 8) as c:
        with pytest.raises(fenced.Unauthenticated):
            c.acquire(key)


def test_client_certificate(secure, pki):
    node, _ = secure
    key = "billing/" + uuid.uuid4().hex[:8]
    with fenced.Client(node.url, ca_file=str(pki / "ca.pem"), cert_file=str(pki / "client.pem"),
                       key_file=str(pki / "client-key.pem")) as c:
        with c.acquire(key) as lease:
            assert lease.token > 0


def test_untrusted_server_is_refused(secure):
    node, secret = secure
    with fenced.Client(node.url, token=secret) as c:  # the system's roots do not know the test CA
        with pytest.raises(fenced.Unavailable) as e:
            c.acquire("billing/x")
        assert e.value.may_have_arrived is False


def test_signature_reaches_a_verifying_store(secure, pki, bindir):
    """The store refuses writes without a valid Fencing-Token-Signature; the lease's goes through."""
    node, secret = secure
    import ssl

    ctx = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    (pki / "trusted.json").write_bytes(urllib.request.urlopen(node.url + "/v1/keys", context=ctx).read())
    port = conftest.free_port()
    d = pki / ("store-" + uuid.uuid4().hex[:6])
    proc = subprocess.Popen([str(bindir / "fenced"), "store", "--data-dir", str(d), "--listen", f"127.0.0.1:{port}",
                             "--trusted-keys-file", str(pki / "trusted.json")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        import time

        for _ in range(300):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/objects/none", timeout=1)
            except urllib.error.HTTPError:
                break
            except OSError:
                time.sleep(0.05)
        key = "billing/" + uuid.uuid4().hex[:8]
        with fenced.Client(node.url, ca_file=str(pki / "ca.pem"), token=secret) as c, c.acquire(key) as lease:
            url = f"http://127.0.0.1:{port}/v1/objects/{uuid.uuid4().hex}"
            status, _, _ = send(lease, "PUT", url, b"signed")
            assert status // 100 == 2

            class Unsigned:
                key, token, owner, signature = lease.key, lease.token, "", ""

            status, _, body = send(Unsigned(), "PUT", url, b"unsigned")
            assert status == 403 and b"bad-signature" in body
    finally:
        proc.terminate()
        proc.wait(10)


def test_python_guards_verify_go_signatures(secure, pki):
    """The server signs (Go); fenced.sign verifies the same message, and a guard refuses a forgery."""
    import ssl

    from fenced.guards.memory import MemoryGuard
    from fenced.sign import Verifier

    node, secret = secure
    ctx = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    verifier = Verifier.from_key_set(urllib.request.urlopen(node.url + "/v1/keys", context=ctx).read())
    g = MemoryGuard(verifier=verifier)
    key = "billing/" + uuid.uuid4().hex[:8]
    with fenced.Client(node.url, ca_file=str(pki / "ca.pem"), token=secret) as c, c.acquire(key) as lease:
        assert g.do(key, lease.token, lambda: "ok", signature=lease.signature) == "ok"
        for scope, token, sig in ((key, lease.token + 1, lease.signature),  # a forged token
                                  (key + "x", lease.token, lease.signature),  # another scope
                                  (key, lease.token, ""),
                                  (key, lease.token, "k2." + lease.signature.split(".")[1])):
            with pytest.raises(fenced.BadSignature):
                g.do(scope, token, lambda: pytest.fail("applied"), signature=sig)
    assert g.highest(key) == lease.token
