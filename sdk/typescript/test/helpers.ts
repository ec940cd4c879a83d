// Test helpers: a real fenced on a free loopback port, and the machine's
// PostgreSQL, Redis, RabbitMQ and NATS (skipped when absent, failed when
// FENCED_REQUIRE_SERVICES=1).
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import * as https from "node:https";
import { type AddressInfo, createServer, connect } from "node:net";
import type { TestContext } from "node:test";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

/** The repository's root: the first directory above this file with a go.mod (the tests run from build/test). */
export const repo = (() => {
  let d = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(d, "go.mod"))) {
    const up = dirname(d);
    if (up === d) throw new Error("no go.mod above the tests");
    d = up;
  }
  return d;
})();

/** sdk/typescript, where the package.json and examples are. */
export const pkgDir = join(repo, "sdk", "typescript");

/** A running fenced node of the tests. */
export interface Fenced {
  url: string;
  port: number;
  proc: ChildProcess;
  pause(): void;
  resume(): void;
  stop(): Promise<void>;
}

/** The fenced binary: FENCED_BIN (set by test/run.mjs), else built once into a temp dir. */
export function fencedBin(): string {
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
export function fencectlBin(): string {
  if (!process.env.FENCED_FENCECTL) {
    const dir = mkdtempSync(join(tmpdir(), "fenced-ts-"));
    const bin = join(dir, "fencectl");
    const b = spawnSync("go", ["build", "-o", bin, "./cmd/fencectl"], { cwd: repo, stdio: "inherit" });
    if (b.status !== 0) throw new Error("go build ./cmd/fencectl failed");
    process.env.FENCED_FENCECTL = bin;
  }
  return process.env.FENCED_FENCECTL;
}

/** Runs the Go guards once (internal/goguard): {accepted: true} or {stale: true, highest}. */
export function goInterop(...args: (string | number | bigint)[]): { accepted?: boolean; stale?: boolean; duplicate?: boolean; highest?: string; [k: string]: unknown } {
  if (!process.env.FENCED_GOINTEROP) {
    const dir = mkdtempSync(join(tmpdir(), "fenced-ts-"));
    const bin = join(dir, "goguard");
    const b = spawnSync("go", ["build", "-o", bin, "./internal/goguard"], { cwd: repo, stdio: "inherit" });
    if (b.status !== 0) throw new Error("go build ./internal/goguard failed");
    process.env.FENCED_GOINTEROP = bin;
  }
  const r = spawnSync(process.env.FENCED_GOINTEROP, args.map(String), { encoding: "utf8" });
  if (r.status !== 0) throw new Error(`goguard ${args.join(" ")}: ${r.stderr}`);
  return JSON.parse(r.stdout);
}

const used = new Set<number>();
/** A free loopback port, never the same twice in this process. */
export async function freePort(): Promise<number> {
  for (;;) {
    const port = await new Promise<number>((resolve, reject) => {
      const s = createServer();
      s.once("error", reject);
      s.listen(0, "127.0.0.1", () => {
        const p = (s.address() as AddressInfo).port;
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
export async function startCluster(n = 3): Promise<{ nodes: Fenced[]; urls: string[]; stop: () => Promise<void[]> }> {
  const ports: { port: number; raft: number }[] = [];
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
export async function leaderOf(nodes: Fenced[]): Promise<Fenced | undefined> {
  for (const x of nodes) {
    try {
      const r = (await (await fetch(`${x.url}/v1/role`)).json()) as { role?: string; ready?: boolean };
      if (r.role === "leader" && r.ready) return x;
    } catch {}
  }
  return undefined;
}

/** Starts fenced on free ports; stop() kills it and removes its data. */
function healthy(url: string, ca?: string | Buffer): Promise<boolean> {
  if (!ca) return fetch(`${url}/healthz`).then((r) => r.status === 200);
  return new Promise((resolve, reject) => {
    https.get(`${url}/healthz`, { ca }, (res) => {
      res.resume();
      resolve(res.statusCode === 200);
    }).on("error", reject);
  });
}

export async function startFenced(
  extraArgs: string[] = [],
  { ca, port, raft, wait = true }: { ca?: string | Buffer; port?: number; raft?: number; wait?: boolean } = {},
): Promise<Fenced> {
  const bin = fencedBin();
  const dir = mkdtempSync(join(tmpdir(), "fenced-data-"));
  port ??= await freePort();
  raft ??= await freePort();
  const args = ["--data-dir", dir, "--listen", `127.0.0.1:${port}`, "--raft-listen", `127.0.0.1:${raft}`, "--log-level", "warn", ...extraArgs];
  const proc = spawn(bin, args, { stdio: ["ignore", "ignore", "pipe"] });
  let stderr = "";
  proc.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
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

function reachable(port: number): Promise<boolean> {
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
export async function requireService(t: TestContext, name: string, port: number): Promise<boolean> {
  if (await reachable(port)) return true;
  if (process.env.FENCED_REQUIRE_SERVICES === "1") {
    throw new Error(`${name} is not answering on 127.0.0.1:${port} and FENCED_REQUIRE_SERVICES=1`);
  }
  t.skip(`${name} is not answering on 127.0.0.1:${port}`);
  return false;
}

export const pgConfig = { host: "127.0.0.1", port: 5432, user: "postgres", database: "test" };
export const redisConfig = { host: "127.0.0.1", port: 6379 };
export const amqpURL = "amqp://guest:guest@127.0.0.1:5672/";
export const natsServers = "nats://127.0.0.1:4222";

/** A name unique to this run, for keys, scopes and tables. */
export function unique(prefix: string): string {
  return `${prefix}-${process.pid}-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;
}
