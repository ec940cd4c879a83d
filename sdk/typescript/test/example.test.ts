import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pkgDir, requireService, startFenced } from "./helpers.js";

const example = join(pkgDir, "examples", "late-write.mjs");

test("examples/late-write.mjs: the stalled worker's late PostgreSQL write is refused", async (t) => {
  if (!(await requireService(t, "PostgreSQL", 5432))) return;
  assert.ok(readFileSync(example, "utf8").split("\n").length <= 41, "the example stays under 40 lines");
  const f = await startFenced();
  try {
    const r = spawnSync(process.execPath, [example], { env: { ...process.env, FENCED_ENDPOINTS: f.url }, encoding: "utf8", timeout: 30_000 });
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stdout, /A's late write refused: token \d+ < \d+/);
    assert.match(r.stdout, /order status: shipped by B/);
  } finally {
    await f.stop();
  }
});
