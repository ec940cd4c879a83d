import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startFenced, unique } from "./helpers.js";
import { Client, tlsFromFiles, UnauthenticatedError, PermissionDeniedError } from "../src/index.js";

function pki(dir: string): void {
  const ssl = (...args: string[]) => execFileSync("openssl", args, { cwd: dir, stdio: "pipe" });
  ssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "1", "-subj", "/CN=test-ca");
  for (const [name, cn, ext] of [
    ["server", "node1", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth"],
    ["client", "svc", "extendedKeyUsage=clientAuth"],
  ]) {
    writeFileSync(join(dir, `${name}.ext`), ext + "\n");
    ssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", `${name}.key`, "-out", `${name}.csr`, "-subj", `/CN=${cn}`);
    ssl("x509", "-req", "-in", `${name}.csr`, "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-out", `${name}.pem`, "-days", "1", "-extfile", `${name}.ext`);
  }
}

test("TLS, bearer token and client certificates (mTLS)", async () => {
  const dir = mkdtempSync(join(tmpdir(), "fenced-tls-"));
  const secret = "app-secret-0123456789abcdef0123456789";
  const sha = createHash("sha256").update(secret).digest("hex");
  pki(dir);
  writeFileSync(
    join(dir, "auth.json"),
    JSON.stringify({
      tokens: [{ principal: "app", sha256: sha }],
      rules: [
        { principal: "app", prefix: "jobs/", permissions: ["acquire", "renew", "read", "watch"] },
        { principal: "svc", prefix: "svc/", permissions: ["acquire", "renew"] },
      ],
    }),
  );
  const f = await startFenced(
    ["--cert-file", join(dir, "server.pem"), "--key-file", join(dir, "server.key"), "--trusted-ca-file", join(dir, "ca.pem"), "--auth-file", join(dir, "auth.json")],
    { ca: readFileSync(join(dir, "ca.pem")) },
  );
  const clients = [];
  try {
    const tls = tlsFromFiles({ caFile: join(dir, "ca.pem") });
    const app = new Client({ endpoints: f.url, tls, token: secret });
    const anon = new Client({ endpoints: f.url, tls });
    const svc = new Client({ endpoints: f.url, tls: tlsFromFiles({ caFile: join(dir, "ca.pem"), certFile: join(dir, "client.pem"), keyFile: join(dir, "client.key") }) });
    clients.push(app, anon, svc);
    // Bearer token over TLS; renewals over the KeepAlive stream (HTTP/2 with TLS).
    const l = await app.acquire(unique("jobs/"), { ttlMs: 1000 });
    await new Promise((r) => setTimeout(r, 1500));
    assert.equal(l.held, true);
    assert.equal(l.owner, "app"); // the principal
    await l.release();
    await assert.rejects(anon.acquire(unique("jobs/"), { ttlMs: 1000 }), UnauthenticatedError);
    await assert.rejects(app.acquire(unique("svc/"), { ttlMs: 1000 }), PermissionDeniedError);
    // A client certificate is the principal "svc".
    const s = await svc.acquire(unique("svc/"), { ttlMs: 1000 });
    assert.equal(s.owner, "svc");
    await s.release();
  } finally {
    for (const c of clients) await c[Symbol.asyncDispose]();
    await f.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});
