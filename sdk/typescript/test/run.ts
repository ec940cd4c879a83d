// npm test: builds fenced, fencectl and internal/goguard from this repository
// once, then runs every compiled *.test.js with node's test runner, one file
// at a time. Arguments: test files (build/test/x.test.js) to run instead.
import { spawnSync } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { repo } from "./helpers.js";

const here = dirname(fileURLToPath(import.meta.url));
let dir: string | undefined;

function build(env: string, pkg: string): void {
  if (process.env[env]) return;
  dir ??= mkdtempSync(join(tmpdir(), "fenced-ts-"));
  const bin = join(dir, pkg.split("/").pop()!);
  const b = spawnSync("go", ["build", "-o", bin, pkg], { cwd: repo, stdio: "inherit" });
  if (b.status !== 0) {
    console.error(`go build ${pkg} failed`);
    process.exit(1);
  }
  process.env[env] = bin;
}

build("FENCED_BIN", "./cmd/fenced");
build("FENCED_GOINTEROP", "./internal/goguard");
build("FENCED_FENCECTL", "./cmd/fencectl");
const only = process.argv.slice(2);
const files = only.length > 0 ? only : readdirSync(here).filter((f) => f.endsWith(".test.js")).sort().map((f) => join(here, f));
const r = spawnSync(process.execPath, ["--enable-source-maps", "--test", "--test-concurrency=1", ...files], { stdio: "inherit", env: process.env });
if (dir) rmSync(dir, { recursive: true, force: true });
process.exit(r.status ?? 1);
