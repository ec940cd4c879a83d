// npm test: builds fenced from this repository once, then runs every
// *.test.mjs with node's test runner, one file at a time.
import { spawnSync } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const repo = join(here, "..", "..", "..");
let dir;
if (!process.env.FENCED_BIN) {
  dir = mkdtempSync(join(tmpdir(), "fenced-ts-"));
  process.env.FENCED_BIN = join(dir, "fenced");
  const b = spawnSync("go", ["build", "-o", process.env.FENCED_BIN, "./cmd/fenced"], { cwd: repo, stdio: "inherit" });
  if (b.status !== 0) {
    console.error("go build ./cmd/fenced failed");
    process.exit(1);
  }
  process.env.FENCED_GOINTEROP = join(dir, "gointerop");
  const g = spawnSync("go", ["build", "-o", process.env.FENCED_GOINTEROP, "./sdk/typescript/test/gointerop"], { cwd: repo, stdio: "inherit" });
  if (g.status !== 0) {
    console.error("go build ./sdk/typescript/test/gointerop failed");
    process.exit(1);
  }
}
if (!process.env.FENCED_FENCECTL && dir) {
  process.env.FENCED_FENCECTL = join(dir, "fencectl");
  const c = spawnSync("go", ["build", "-o", process.env.FENCED_FENCECTL, "./cmd/fencectl"], { cwd: repo, stdio: "inherit" });
  if (c.status !== 0) {
    console.error("go build ./cmd/fencectl failed");
    process.exit(1);
  }
}
const only = process.argv.slice(2);
const files = only.length > 0 ? only : readdirSync(here).filter((f) => f.endsWith(".test.mjs")).sort().map((f) => join(here, f));
const r = spawnSync(process.execPath, ["--test", "--test-concurrency=1", ...files], { stdio: "inherit", env: process.env });
if (dir) rmSync(dir, { recursive: true, force: true });
process.exit(r.status ?? 1);
