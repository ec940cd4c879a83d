// The message fence without a broker (guard spec, section 8): stamps
// written and read, every parsing edge, the consumer's outcomes through
// MemoryGuard and PgGuard, and how each adapter settles an outcome.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import pg from "pg";
import { headers as natsHeaders } from "@nats-io/transport-node";
import { requireService, pgConfig, unique } from "./helpers.js";
import {
  classify,
  leaseStamp,
  MessageConsumer,
  type MessageHeaders,
  type Outcome,
  readStamp,
  type Stamp,
  writeStamp,
} from "../src/guards/messages.js";
import * as amqp from "../src/guards/amqp.js";
import * as jetstream from "../src/guards/jetstream.js";
import { PgGuard } from "../src/guards/pg.js";
import {
  type Decision,
  DuplicateError,
  InvalidScopeError,
  InvalidSequenceError,
  InvalidTokenError,
  MemoryGuard,
  NoTokenError,
  SequenceGapError,
  StaleTokenError,
  TokenOutOfRangeError,
} from "../src/index.js";

type ErrorClass = typeof NoTokenError | typeof InvalidTokenError | typeof InvalidScopeError | typeof InvalidSequenceError;

const ok = { "Fencing-Scope": "orders/7", "Fencing-Token": "42" };

test("readStamp: values accepted, and what they read as", () => {
  const cases: [string, MessageHeaders, Stamp][] = [
    [
      "full",
      { ...ok, "Fencing-Sequence": "3", "Fencing-Owner": "worker-a", "Fencing-Token-Signature": "k1.c2ln", Other: 5 },
      { scope: "orders/7", token: 42n, sequence: 3n, owner: "worker-a", signature: "k1.c2ln" },
    ],
    ["ten", { "Fencing-Scope": "s", "Fencing-Token": "10", "Fencing-Sequence": "10" }, { scope: "s", token: 10n, sequence: 10n }],
    ["largest token", { "Fencing-Scope": "s", "Fencing-Token": "18446744073709551615" }, { scope: "s", token: (1n << 64n) - 1n }],
    ["largest sequence", { ...ok, "Fencing-Sequence": "9223372036854775807" }, { scope: "orders/7", token: 42n, sequence: (1n << 63n) - 1n }],
    ["byte arrays (AMQP x)", { "Fencing-Scope": Buffer.from("orders/é"), "Fencing-Token": new Uint8Array([0x35]), "Fencing-Sequence": Buffer.from("2") }, { scope: "orders/é", token: 5n, sequence: 2n }],
    ["undefined is absent", { ...ok, "Fencing-Sequence": undefined, "Fencing-Owner": undefined }, { scope: "orders/7", token: 42n }],
    ["invalid owner dropped", { ...ok, "Fencing-Owner": "a\u0000b" }, { scope: "orders/7", token: 42n }],
    ["owner above 256 bytes dropped", { ...ok, "Fencing-Owner": "é".repeat(129) }, { scope: "orders/7", token: 42n }],
    ["owner of another type dropped", { ...ok, "Fencing-Owner": 7, "Fencing-Token-Signature": { a: 1 } }, { scope: "orders/7", token: 42n }],
    ["Map", new Map<string, unknown>([["Fencing-Scope", "m"], ["Fencing-Token", "1"]]), { scope: "m", token: 1n }],
  ];
  for (const [name, h, want] of cases) {
    assert.deepEqual(readStamp(h), want, name);
  }
});

test("readStamp: refusals, by class and in the order of checking", () => {
  const two = (h: Record<string, string>, twice: string): MessageHeaders => ({
    values: (k: string) => (k in h ? (k === twice ? [h[k]!, h[k]!] : [h[k]!]) : []),
  });
  const cases: [string, MessageHeaders | null | undefined, ErrorClass, RegExp?][] = [
    ["no headers", undefined, NoTokenError],
    ["null headers", null, NoTokenError],
    ["empty", {}, NoTokenError],
    ["empty token", { ...ok, "Fencing-Token": "" }, NoTokenError],
    ["lower-case name", { "Fencing-Scope": "s", "fencing-token": "1" }, NoTokenError],
    ["token 0", { ...ok, "Fencing-Token": "0" }, InvalidTokenError, /0 is never issued/],
    ["token 000", { ...ok, "Fencing-Token": "000" }, InvalidTokenError],
    ["token with leading zeros", { ...ok, "Fencing-Token": "007" }, InvalidTokenError, /leading zero/],
    ["token 2^64-1 with a leading zero", { ...ok, "Fencing-Token": "018446744073709551615" }, InvalidTokenError, /leading zero/],
    ["token with spaces around", { ...ok, "Fencing-Token": " 5 " }, InvalidTokenError],
    ["token with a tab after", { ...ok, "Fencing-Token": "5\t" }, InvalidTokenError],
    ["token 2^64", { ...ok, "Fencing-Token": "18446744073709551616" }, InvalidTokenError, /uint64/],
    ["signed token", { ...ok, "Fencing-Token": "+1" }, InvalidTokenError],
    ["negative token", { ...ok, "Fencing-Token": "-1" }, InvalidTokenError],
    ["token with a space", { ...ok, "Fencing-Token": " 1" }, InvalidTokenError],
    ["token in exponent form", { ...ok, "Fencing-Token": "1e3" }, InvalidTokenError],
    ["token as a number", { ...ok, "Fencing-Token": 42 }, InvalidTokenError, /is a number, not a string/],
    ["token as a bigint", { ...ok, "Fencing-Token": 42n }, InvalidTokenError, /bigint/],
    ["token as a table", { ...ok, "Fencing-Token": { v: "42" } }, InvalidTokenError, /table/],
    ["token as an array", { ...ok, "Fencing-Token": ["42"] }, InvalidTokenError, /array/],
    ["token as AMQP void", { ...ok, "Fencing-Token": null }, InvalidTokenError, /null/],
    ["token as a boolean", { ...ok, "Fencing-Token": true }, InvalidTokenError],
    ["token given twice", two(ok, "Fencing-Token"), InvalidTokenError, /given 2 times/],
    ["bad token before bad scope", { "Fencing-Scope": "a\nb", "Fencing-Token": "x" }, InvalidTokenError],
    ["no scope", { "Fencing-Token": "1" }, InvalidScopeError],
    ["empty scope", { "Fencing-Scope": "", "Fencing-Token": "1" }, InvalidScopeError],
    ["scope with a control character", { "Fencing-Scope": "a\nb", "Fencing-Token": "1" }, InvalidScopeError],
    ["scope with U+200B", { "Fencing-Scope": "a\u200bb", "Fencing-Token": "1" }, InvalidScopeError],
    ["scope above 512 bytes", { "Fencing-Scope": "s".repeat(513), "Fencing-Token": "1" }, InvalidScopeError],
    ["scope as a number", { "Fencing-Scope": 7, "Fencing-Token": "1" }, InvalidScopeError, /number/],
    ["scope not UTF-8", { "Fencing-Scope": Buffer.from([0x61, 0xff]), "Fencing-Token": "1" }, InvalidScopeError, /UTF-8/],
    ["scope given twice", two(ok, "Fencing-Scope"), InvalidScopeError, /given 2 times/],
    ["scope bytes with a byte-order mark", { "Fencing-Scope": Buffer.from("\ufeffs"), "Fencing-Token": "1" }, InvalidScopeError],
    ["token bytes with a byte-order mark", { "Fencing-Scope": "s", "Fencing-Token": Buffer.from("\ufeff1") }, InvalidTokenError],
    ["bad scope before bad sequence", { "Fencing-Token": "1", "Fencing-Sequence": "0" }, InvalidScopeError],
    ["empty sequence", { ...ok, "Fencing-Sequence": "" }, InvalidSequenceError],
    ["sequence 0", { ...ok, "Fencing-Sequence": "0" }, InvalidSequenceError],
    ["sequence 2^63", { ...ok, "Fencing-Sequence": "9223372036854775808" }, InvalidSequenceError],
    ["sequence 2^64", { ...ok, "Fencing-Sequence": "18446744073709551616" }, InvalidSequenceError],
    ["signed sequence", { ...ok, "Fencing-Sequence": "+3" }, InvalidSequenceError],
    ["sequence with leading zeros", { ...ok, "Fencing-Sequence": "0009" }, InvalidSequenceError, /leading zero/],
    ["sequence as a number", { ...ok, "Fencing-Sequence": 3 }, InvalidSequenceError, /number/],
    ["sequence given twice", two({ ...ok, "Fencing-Sequence": "3" }, "Fencing-Sequence"), InvalidSequenceError, /given 2 times/],
  ];
  for (const [name, h, cls, msg] of cases) {
    assert.throws(
      () => readStamp(h),
      (e: unknown) => {
        assert.ok(e instanceof cls, `${name}: ${String(e)} is not a ${cls.name}`);
        if (msg) assert.match((e as Error).message, msg, name);
        assert.equal(classify(e), "refused", name);
        return true;
      },
      name,
    );
  }
  // Given twice, an owner is dropped, not refused.
  assert.deepEqual(readStamp(two({ ...ok, "Fencing-Owner": "a" }, "Fencing-Owner")), { scope: "orders/7", token: 42n });
});

test("writeStamp: replaces fencing headers, removes the optional ones it does not send, keeps the rest", () => {
  const h: Record<string, unknown> = { "Fencing-Sequence": "99", "Fencing-Token-Signature": "old", "Fencing-Token": 3, Other: "kept" };
  assert.equal(writeStamp({ scope: "orders/7", token: 9n, owner: "worker-a" }, h), h);
  assert.deepEqual(h, { "Fencing-Scope": "orders/7", "Fencing-Token": "9", "Fencing-Owner": "worker-a", Other: "kept" });
  const s: Stamp = { scope: "orders/7", token: (1n << 64n) - 1n, sequence: (1n << 63n) - 1n, owner: "w", signature: "k.sig" };
  assert.deepEqual(readStamp(writeStamp(s, {})), s);
  // An owner that would be dropped is not sent.
  assert.deepEqual(writeStamp({ scope: "s", token: 1n, owner: "a\u0000" }, { "Fencing-Owner": "old" }), { "Fencing-Scope": "s", "Fencing-Token": "1" });
  // A Map, and NATS's MsgHdrs, through set and delete.
  const m = writeStamp({ scope: "s", token: 2n, sequence: 4n }, new Map<string, unknown>([["Fencing-Owner", "x"]]));
  assert.deepEqual([...m], [["Fencing-Scope", "s"], ["Fencing-Token", "2"], ["Fencing-Sequence", "4"]]);
  const nh = natsHeaders();
  nh.set("Fencing-Owner", "old");
  nh.set("Nats-Msg-Id", "m1");
  writeStamp({ scope: "orders/7", token: 5n, sequence: 1n }, nh);
  assert.deepEqual(readStamp(nh), { scope: "orders/7", token: 5n, sequence: 1n });
  assert.deepEqual(nh.keys().sort(), ["Fencing-Scope", "Fencing-Sequence", "Fencing-Token", "Nats-Msg-Id"]);
  nh.append("Fencing-Token", "5");
  assert.throws(() => readStamp(nh), InvalidTokenError);
});

test("writeStamp: an invalid stamp throws and changes nothing", () => {
  const bad: [Stamp, ErrorClass | typeof TokenOutOfRangeError][] = [
    [{ scope: "s", token: 0n }, NoTokenError],
    [{ scope: "s", token: 1n << 64n }, TokenOutOfRangeError],
    [{ scope: "s", token: -1n }, TokenOutOfRangeError],
    [{ scope: "", token: 1n }, InvalidScopeError],
    [{ scope: "a\nb", token: 1n }, InvalidScopeError],
    [{ scope: "s", token: 1n, sequence: 1n << 63n }, InvalidSequenceError],
    [{ scope: "s", token: 1n, sequence: -1n }, InvalidSequenceError],
  ];
  const badSignature: [Stamp, typeof TypeError] = [{ scope: "s", token: 1n, signature: "k.a\r\nFencing-Token: 9" }, TypeError];
  for (const [s, cls] of [...bad, badSignature]) {
    const h = { "Fencing-Scope": "old", "Fencing-Token": "1", "Fencing-Sequence": "1" };
    assert.throws(() => writeStamp(s, h), cls, `${s.scope} ${s.token} ${s.sequence}`);
    assert.deepEqual(h, { "Fencing-Scope": "old", "Fencing-Token": "1", "Fencing-Sequence": "1" });
    const nh = natsHeaders();
    nh.set("Fencing-Scope", "old");
    assert.throws(() => writeStamp(s, nh), cls);
    assert.deepEqual([...nh], [["Fencing-Scope", ["old"]]]);
  }
});

test("leaseStamp: key, token, owner, signature, and the lease's next sequence when asked", () => {
  let n = 0n;
  const lease = { key: "orders/7", token: 9n, owner: "worker-a", signature: "k.sig", markLost() {}, nextSequence: () => ++n };
  assert.deepEqual(leaseStamp(lease), { scope: "orders/7", token: 9n, owner: "worker-a", signature: "k.sig" });
  assert.equal(n, 0n, "an unnumbered stamp took a sequence");
  assert.equal(leaseStamp(lease, { sequences: true }).sequence, 1n);
  assert.equal(leaseStamp(lease, { sequences: true }).sequence, 2n);
  assert.equal(leaseStamp(lease, { sequence: 7n, sequences: true }).sequence, 7n);
  assert.equal(n, 2n);
  assert.deepEqual(leaseStamp({ key: "k", token: 1n, owner: "\u0007", markLost() {} }, { sequences: true }), { scope: "k", token: 1n });
  // An invalid lease takes no sequence.
  assert.throws(() => leaseStamp({ ...lease, key: "" }, { sequences: true }), InvalidScopeError);
  assert.throws(() => leaseStamp(lease, { sequence: 1n << 63n }), InvalidSequenceError);
  assert.equal(leaseStamp(lease, { sequences: true }).sequence, 3n);
});

test("amqp.publishOptions copies; jetstream.stampHeaders refuses a scope NATS would trim", () => {
  const base = { persistent: true, headers: { Other: 1, "Fencing-Owner": "old" } };
  const o = amqp.publishOptions({ scope: "s", token: 3n }, base);
  assert.deepEqual(o, { persistent: true, headers: { Other: 1, "Fencing-Scope": "s", "Fencing-Token": "3" } });
  assert.deepEqual(base.headers, { Other: 1, "Fencing-Owner": "old" });
  assert.deepEqual(amqp.publishOptions({ scope: "s", token: 3n }).headers, { "Fencing-Scope": "s", "Fencing-Token": "3" });
  const h = natsHeaders();
  assert.throws(() => jetstream.stampHeaders({ scope: "orders/7 ", token: 1n }, h), InvalidScopeError);
  assert.deepEqual(h.keys(), []);
  assert.deepEqual(readStamp(jetstream.stampHeaders({ scope: "orders/7", token: 1n }, h)), { scope: "orders/7", token: 1n });
});

function stamped(scope: string, token: bigint, sequence?: bigint): Record<string, unknown> {
  return writeStamp({ scope, token, sequence }, {});
}

test("MessageConsumer: the outcome table, through MemoryGuard", async () => {
  const decisions: Decision[] = [];
  const c = new MessageConsumer(new MemoryGuard({ observe: (d) => decisions.push(d) }));
  const applied: string[] = [];
  const boom = new Error("boom");
  const steps: [string, MessageHeaders | Stamp | undefined, boolean, Outcome, (new (...a: never[]) => unknown) | Error | null][] = [
    ["first", stamped("s", 5n, 1n), false, "applied", null],
    ["next", stamped("s", 5n, 2n), false, "applied", null],
    ["redelivered", stamped("s", 5n, 2n), false, "duplicate", DuplicateError],
    ["effect fails", stamped("s", 5n, 3n), true, "redeliver", boom],
    ["after the failure", stamped("s", 5n, 3n), false, "applied", null],
    ["new holder", stamped("s", 6n, 1n), false, "applied", null],
    ["old holder", stamped("s", 5n, 4n), false, "stale", StaleTokenError],
    ["unsequenced", stamped("s", 6n), false, "applied", null],
    ["other scope", stamped("t", 1n), false, "applied", null],
    ["a stamp object", { scope: "t", token: 2n, owner: "b" }, false, "applied", null],
    ["an invalid stamp object", { scope: "t", token: 0n }, false, "refused", NoTokenError],
    ["a stamp object out of range", { scope: "t", token: 1n << 64n }, false, "refused", TokenOutOfRangeError],
    ["no token", { "Fencing-Scope": "s" }, false, "refused", NoTokenError],
    ["no headers", undefined, false, "refused", NoTokenError],
  ];
  for (const [name, msg, fail, want, err] of steps) {
    const r = await c.apply(msg, async (_ctx, stamp) => {
      if (fail) throw boom;
      applied.push(name);
      return stamp.token;
    });
    assert.equal(r.outcome, want, name);
    if (r.outcome === "applied") {
      assert.equal(r.value, r.stamp.token, name);
    } else if (err instanceof Error) {
      assert.equal(r.error, err, name);
    } else {
      assert.ok(err && r.error instanceof err, `${name}: ${String(r.error)}`);
    }
    if (want === "refused") assert.equal(r.stamp, undefined, name);
  }
  assert.deepEqual(applied, ["first", "next", "after the failure", "new holder", "unsequenced", "other scope", "a stamp object"]);
  const stale = decisions.filter((d) => !d.accepted && !d.duplicate);
  assert.deepEqual(stale.map((d) => [d.scope, d.presented, d.highest]), [["s", 5n, 6n]]);
  assert.equal(await c.guard.highest("s"), 6n);
  assert.equal(await c.guard.highest("t"), 2n);
  assert.throws(() => new MessageConsumer(undefined as unknown as MemoryGuard), TypeError);
});

test("MessageConsumer: a strict guard's gap is redelivered until the message before it is applied", async () => {
  const c = new MessageConsumer(new MemoryGuard(undefined, { strictSequences: true }));
  const got: Outcome[] = [];
  for (const q of [1n, 3n, 2n, 3n]) {
    const r = await c.apply(stamped("s", 4n, q), async () => {});
    if (r.outcome === "redeliver") assert.ok(r.error instanceof SequenceGapError);
    got.push(r.outcome);
  }
  assert.deepEqual(got, ["applied", "redeliver", "applied", "applied"]);
});

test("settle: ack, ack, ack, reject without requeue, nack with requeue (amqp); ack, ack, ack, term, nak (jetstream)", () => {
  const outcomes: Outcome[] = ["applied", "stale", "duplicate", "refused", "redeliver"];
  const calls: string[] = [];
  const ch = {
    ack: (_m: unknown, all?: boolean) => void calls.push(`ack ${all ?? false}`),
    reject: (_m: unknown, requeue?: boolean) => void calls.push(`reject requeue=${requeue}`),
    nack: (_m: unknown, all?: boolean, requeue?: boolean) => void calls.push(`nack ${all} requeue=${requeue}`),
  };
  for (const o of outcomes) amqp.settle(ch, {} as never, o);
  assert.deepEqual(calls, ["ack false", "ack false", "ack false", "reject requeue=false", "nack false requeue=true"]);
  calls.length = 0;
  const m = {
    ack: () => void calls.push("ack"),
    term: (reason?: string) => void calls.push(reason === undefined ? "term" : `term ${reason}`),
    nak: (ms?: number) => void calls.push(ms === undefined ? "nak" : `nak ${ms}`),
  };
  for (const o of outcomes) jetstream.settle(m, o);
  jetstream.settle(m, "redeliver", { redeliverDelayMs: 250 });
  assert.deepEqual(calls, ["ack", "ack", "ack", "term", "nak", "nak 250"]);
});

let pool: pg.Pool;
const table = unique("fence_scopes_msg").replace(/-/g, "_");
const effects = unique("fence_effects_msg").replace(/-/g, "_");
before(() => {
  pool = new pg.Pool(pgConfig);
});
after(async () => {
  await pool?.query(`DROP TABLE IF EXISTS "${table}", "${effects}"`).catch(() => {});
  await pool?.end();
});

test("MessageConsumer with PgGuard: the effect commits with the token, or neither does", async (t) => {
  if (!(await requireService(t, "PostgreSQL", 5432))) return;
  const guard = new PgGuard(pool, { table });
  await guard.migrate();
  await pool.query(`CREATE TABLE "${effects}" (id text NOT NULL)`);
  const c = new MessageConsumer(guard);
  const scope = unique("orders/7");
  const insert = (id: string, fail = false) => async (tx: pg.PoolClient) => {
    await tx.query(`INSERT INTO "${effects}" (id) VALUES ($1)`, [id]);
    if (fail) throw new Error("effect failed after its write");
  };
  assert.equal((await c.apply(stamped(scope, 5n, 1n), insert("a"))).outcome, "applied");
  // A failed effect rolls back its write and the token: redelivered.
  assert.equal((await c.apply(stamped(scope, 6n, 1n), insert("b", true))).outcome, "redeliver");
  assert.equal(await guard.highest(scope), 5n);
  assert.equal((await c.apply(stamped(scope, 5n, 1n), insert("a"))).outcome, "duplicate");
  assert.equal((await c.apply(stamped(scope, 6n, 1n), insert("b"))).outcome, "applied");
  assert.equal((await c.apply(stamped(scope, 5n, 2n), insert("late"))).outcome, "stale");
  // A token PostgreSQL cannot store is refused, not redelivered.
  const big = await c.apply(stamped(scope, 1n << 63n), insert("big"));
  assert.equal(big.outcome, "refused");
  assert.ok("error" in big && big.error instanceof TokenOutOfRangeError);
  const { rows } = await pool.query(`SELECT id FROM "${effects}" ORDER BY id`);
  assert.deepEqual(rows.map((r: { id: string }) => r.id), ["a", "b"]);
  assert.equal(await guard.highest(scope), 6n);
});
