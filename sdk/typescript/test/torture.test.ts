// Torture runs with TypeScript workers (fencectl torture --worker-cmd,
// docs/torture.md): the checkers find nothing in a run of the real client,
// and catch the mutant that counts the local deadline from the answer.
// Long: runs with FENCED_LONG=1, as CI sets.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { fencectlBin, requireService } from "./helpers.js";

const worker = fileURLToPath(new URL("../torture/worker.js", import.meta.url));
const skip = process.env.FENCED_LONG !== "1" && "FENCED_LONG=1 runs it";

interface Summary {
  violations: number;
  acquisitions: { ok: number };
  renewals: { ok: number };
  checks: { name: string; checked: number; violations: number }[];
}

function torture(env: Record<string, string>) {
  const out = mkdtempSync(join(tmpdir(), "fenced-ts-torture-"));
  const r = spawnSync(
    fencectlBin(),
    ["torture", "--duration", "25s", "--out", out, "--postgres", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable",
      "--worker-cmd", `${process.execPath} ${worker}`],
    { env: { ...process.env, ...env }, encoding: "utf8", timeout: 240_000 },
  );
  let summary: Summary;
  try {
    summary = JSON.parse(readFileSync(join(out, "summary.json"), "utf8")) as Summary;
  } catch {
    throw new Error(`no summary (exit ${r.status}): ${r.stdout}\n${r.stderr}`);
  }
  const byName = Object.fromEntries(summary.checks.map((c) => [c.name, c]));
  return { status: r.status, summary, byName, out, log: r.stdout + r.stderr };
}

test("torture with TypeScript workers: no violations", { skip }, async (t) => {
  if (!(await requireService(t, "PostgreSQL", 5432))) return;
  const run = torture({ FENCED_TORTURE_MUTANT: "" });
  assert.equal(run.summary.violations, 0, run.log);
  assert.equal(run.status, 0, run.log);
  assert.ok(run.summary.acquisitions.ok > 0 && run.summary.renewals.ok > 0, "leases were granted and renewed");
  assert.ok(run.byName["client-deadline-conservative"].checked > 0, "the client-deadline checker ran");
  rmSync(run.out, { recursive: true, force: true });
});

test("torture with TypeScript workers: the deadline-from-the-answer mutant is caught", { skip }, async (t) => {
  if (!(await requireService(t, "PostgreSQL", 5432))) return;
  const run = torture({ FENCED_TORTURE_MUTANT: "deadline-from-answer" });
  assert.ok(run.byName["client-deadline-conservative"].violations > 0, run.log);
  assert.notEqual(run.status, 0);
  rmSync(run.out, { recursive: true, force: true });
});
