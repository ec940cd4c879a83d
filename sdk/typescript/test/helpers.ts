// Test helpers: a real fenced on a free loopback port, and the machine's
// PostgreSQL and Redis (skipped when absent, failed when
// FENCED_REQUIRE_SERVICES=1).
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import * as https from "node:https";
import { createServer, connect } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

export const repo = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");

/** The fenced binary: FENCED_BIN (set by test/run.mjs), else built once into a temp dir. */
export function fencedBin() {
  if (!process.env.FENCED_BIN) {
    const dir = mkdtempSync(join(tmpdir(), "fenced-ts-"));
    const bin = join(dir, "fenced");
    const b = spawnSync("go", ["build", "-o", bin, "./cmd/fenced"], { cwd: repo, stdio: "inherit" });
    if (b.status !== 0) throw new Error("go build ./cmd/fenced failed");
    process.env.FENCED_BIN = bin;
  }
  return process.env.FENCED_BIN;
}

/** The fencectl binary: FENCED_FENCECTL (set by test/run.mjs), else built once into a temp dir. */
export function fencectlBin() {
  if (!process.env.FENCED_FENCECTL) {
    const dir = mkdtempSync(join(tmpdir(), "fenced-ts-"));
    const bin = join(dir, "fencectl");
    const b = spawnSync("go", ["build", "-o", bin, "./cmd/fencectl"], { cwd: repo, stdio: "inherit" });
    if (b.status !== 0) throw new Error("go build ./cmd/fencectl failed");
    process.env.FENCED_FENCECTL = bin;
  }
  return process.env.FENCED_FENCECTL;
}

/** Runs the Go guards once (test/gointerop): {accepted: true} or {stale: true, highest}. */
export function goInterop(...args) {
  if (!process.env.FENCED_GOINTEROP) {
    const dir = mkdtempSync(join(tmpdir(), "fenced-ts-"));
    const bin = join(dir, "gointerop");
    const b = spawnSync("go", ["build", "-o", bin, "./sdk/typescript/test/gointerop"], { cwd: repo, stdio: "inherit" });
    if (b.status !== 0) throw new Error("go build ./sdk/typescript/test/gointerop failed");
    process.env.FENCED_GOINTEROP = bin;
  }
  const r = spawnSync(process.env.FENCED_GOINTEROP, args.map(String), { encoding: "utf8" });
  if (r.status !== 0) throw new Error(`gointerop ${args.join(" ")}: ${r.stderr}`);
  return JSON.parse(r.stdout);
}

const used = new Set();
/** A free loopback port, never the same twice in this process. */
export async function freePort() {
  for (;;) {
    const port = await new Promise((resolve, reject) => {
      const s = createServer();
      s.once("error", reject);
      s.listen(0, "127.0.0.1", () => {
        const p = s.address().port;
        s.close(() => resolve(p));
      });
    });
    if (!used.has(port)) {
      used.add(port);
      return port;
    }
  }
}

/** Starts a cluster of n nodes on free ports; waits until one leads. */
export async function startCluster(n = 3) {
  const ports = [];
  for (let i = 0; i < n; i++) ports.push({ port: await freePort(), raft: await freePort() });
  const initial = ports.map((p, i) => `n${i + 1}=127.0.0.1:${p.raft}`).join(",");
  const nodes = await Promise.all(
    ports.map((p, i) => startFenced(["--node-id", `n${i + 1}`, "--initial-cluster", initial], { ...p, wait: false })),
  );
  const deadline = Date.now() + 30_000;
  while ((await leaderOf(nodes)) === undefined) {
    if (Date.now() > deadline) throw new Error("no leader within 30s");
    await new Promise((r) => setTimeout(r, 100));
  }
  return { nodes, urls: nodes.map((x) => x.url), stop: () => Promise.all(nodes.map((x) => x.stop())) };
}

/** The node that says it leads and is ready, if any. */
export async function leaderOf(nodes) {
  for (const x of nodes) {
    try {
      const r = await (await fetch(`${x.url}/v1/role`)).json();
      if (r.role === "leader" && r.ready) return x;
    } catch {}
  }
  return undefined;
}

/** Starts fenced on free ports; stop() kills it and removes its data. */
function healthy(url, ca) {
  if (!ca) return fetch(`${url}/healthz`).then((r) => r.status === 200);
  return new Promise((resolve, reject) => {
    https.get(`${url}/healthz`, { ca }, (res) => {
      res.resume();
      resolve(res.statusCode === 200);
    }).on("error", reject);
  });
}

export async function startFenced(extraArgs = [], { ca, port, raft, wait = true } = {}) {
  const bin = fencedBin();
  const dir = mkdtempSync(join(tmpdir(), "fenced-data-"));
  port ??= await freePort();
  raft ??= await freePort();
  const args = ["--data-dir", dir, "--listen", `127.0.0.1:${port}`, "--raft-listen", `127.0.0.1:${raft}`, "--log-level", "warn", ...extraArgs];
  const proc = spawn(bin, args, { stdio: ["ignore", "ignore", "pipe"] });
  let stderr = "";
  proc.stderr.on("data", (d) => (stderr += d));
  const url = `${ca ? "https" : "http"}://127.0.0.1:${port}`;
  const deadline = Date.now() + 30_000;
  for (; wait; ) {
    if (proc.exitCode !== null) throw new Error(`fenced exited: ${stderr}`);
    try {
      if (await healthy(url, ca)) break;
    } catch {}
    if (Date.now() > deadline) {
      proc.kill("SIGKILL");
      throw new Error(`fenced did not become healthy: ${stderr}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    url,
    port,
    proc,
    pause: () => proc.kill("SIGSTOP"),
    resume: () => proc.kill("SIGCONT"),
    async stop() {
      if (proc.exitCode === null && proc.signalCode === null) {
        proc.kill("SIGCONT");
        proc.kill("SIGKILL");
        await new Promise((r) => proc.once("exit", r));
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

function reachable(port) {
  return new Promise((resolve) => {
    const s = connect(port, "127.0.0.1");
    s.once("connect", () => {
      s.destroy();
      resolve(true);
    });
    s.once("error", () => resolve(false));
  });
}

/**
 * Returns true when the service answers on port; otherwise skips t, or fails
 * when FENCED_REQUIRE_SERVICES=1.
 */
export async function requireService(t, name, port) {
  if (await reachable(port)) return true;
  if (process.env.FENCED_REQUIRE_SERVICES === "1") {
    throw new Error(`${name} is not answering on 127.0.0.1:${port} and FENCED_REQUIRE_SERVICES=1`);
  }
  t.skip(`${name} is not answering on 127.0.0.1:${port}`);
  return false;
}

export const pgConfig = { host: "127.0.0.1", port: 5432, user: "postgres", database: "test" };
export const redisConfig = { host: "127.0.0.1", port: 6379 };

/** A name unique to this run, for keys, scopes and tables. */
export function unique(prefix) {
  return `${prefix}-${process.pid}-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;
}
