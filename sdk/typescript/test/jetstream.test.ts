// The message fence against the real NATS JetStream and PostgreSQL (guard
// spec, section 8), as fence/fencemsg/fencejetstream's tests do in Go: a
// paused producer's messages are refused after the new holder's were
// applied, a message redelivered after its commit is a duplicate, malformed
// stamps are terminated, a failed effect is nacked and applied once, and no
// message is lost.
import { test } from "node:test";
import assert from "node:assert/strict";
import { connect, headers, nanos, type MsgHdrs, type NatsConnection } from "@nats-io/transport-node";
import { AckPolicy, jetstream, jetstreamManager, type JetStreamClient, type JetStreamManager, type JsMsg } from "@nats-io/jetstream";
import { natsServers as servers, requireService, startFenced, unique } from "./helpers.js";
import { Sink } from "./msgsink.js";
import { handle, stampHeaders } from "../src/guards/jetstream.js";
import { leaseStamp, type Outcome, type Stamp } from "../src/guards/messages.js";
import { Client } from "../src/index.js";

const durable = "consumer";
const ackWaitMs = 3000;

/**
 * The connections and streams of one test: close() deletes the streams,
 * then closes the connections (both are needed for the deletes).
 */
class Nats {
  readonly conns: NatsConnection[] = [];
  readonly #streams: [JetStreamManager, string][] = [];

  /** One process's connection: closing it is that process stopping; JetStream delivers what it held unacked again after the ack wait. */
  async dial(): Promise<{ nc: NatsConnection; js: JetStreamClient }> {
    const nc = await connect({ servers });
    this.conns.push(nc);
    return { nc, js: jetstream(nc) };
  }

  /** A stream of one subject with a durable consumer (explicit acks). */
  async stream(): Promise<{ jsm: JetStreamManager; stream: string; subject: string }> {
    const { nc } = await this.dial();
    const jsm = await jetstreamManager(nc);
    const stream = unique("FENCEMSG").replace(/-/g, "_");
    const subject = `fencemsg.${stream}`;
    await jsm.streams.add({ name: stream, subjects: [subject] });
    this.#streams.push([jsm, stream]);
    await jsm.consumers.add(stream, { durable_name: durable, ack_policy: AckPolicy.Explicit, ack_wait: nanos(ackWaitMs), max_ack_pending: 100 });
    return { jsm, stream, subject };
  }

  async close(): Promise<void> {
    for (const [jsm, stream] of this.#streams) await jsm.streams.delete(stream);
    await Promise.all(this.conns.map((nc) => nc.close()));
  }
}

/** Takes n messages from the durable consumer, waiting at most 20s in all. */
async function fetchN(js: JetStreamClient, stream: string, n: number): Promise<JsMsg[]> {
  const c = await js.consumers.get(stream, durable);
  const out: JsMsg[] = [];
  const deadline = Date.now() + 20_000;
  while (out.length < n && Date.now() < deadline) {
    for await (const m of await c.fetch({ max_messages: n - out.length, expires: 1000 })) out.push(m);
  }
  assert.equal(out.length, n, `fetched ${out.length} messages, want ${n}`);
  return out;
}

const idOf = (m: JsMsg): string => m.string();

async function publish(js: JetStreamClient, subject: string, id: string, s: Stamp | MsgHdrs | undefined): Promise<number> {
  const h = s === undefined || "values" in s ? s : stampHeaders(s, headers());
  return (await js.publish(subject, id, h ? { headers: h } : {})).seq;
}

test("JetStream: a paused producer's messages are acked as stale after the new holder's; a copy after a commit is a duplicate; none lost", async (t) => {
  if (!(await requireService(t, "NATS", 4222)) || !(await requireService(t, "PostgreSQL", 5432))) return;
  const nats = new Nats();
  t.after(() => nats.close());
  const sink = new Sink();
  await sink.setUp();
  t.after(() => sink.close());
  const f = await startFenced();
  t.after(() => f.stop());
  const a = new Client({ endpoints: f.url, owner: "A" });
  const b = new Client({ endpoints: f.url, owner: "B" });
  t.after(() => Promise.all([a.close(), b.close()]));
  const { jsm, stream, subject } = await nats.stream();

  const scope = unique("orders");
  const leaseA = await a.acquire(scope, { ttlMs: 1000 });
  const producerA = await nats.dial();
  for (const id of ["a1", "a2", "a3", "a4"]) {
    await publish(producerA.js, subject, id, leaseStamp(leaseA, { sequences: true }));
  }
  const a5 = leaseStamp(leaseA, { sequences: true }); // stamped, then A pauses before publishing it
  const run = async (m: JsMsg): Promise<Outcome> => {
    const r = await handle(sink.consumer, m, sink.effect(idOf(m)));
    assert.equal(r.settleError, undefined);
    assert.notEqual(r.outcome, "refused", `${idOf(m)}: ${String("error" in r && r.error)}`);
    sink.record(idOf(m), r.outcome);
    return r.outcome;
  };

  // A consumer that will stall takes A's four messages, applies two and holds the others unacked.
  const stalled = await nats.dial();
  const held = await fetchN(stalled.js, stream, 4);
  assert.deepEqual(held.map(idOf), ["a1", "a2", "a3", "a4"]);
  for (const m of held.slice(0, 2)) assert.equal(await run(m), "applied", idOf(m));

  // A pauses: no renewals; B gets the key after A's TTL.
  leaseA.orphan();
  const leaseB = await b.acquire(scope, { waitMs: 10_000 });
  assert.ok(leaseB.token > leaseA.token);
  const producerB = await nats.dial();
  for (const id of ["b1", "b2", "b3", "b4", "b5"]) {
    await publish(producerB.js, subject, id, leaseStamp(leaseB, { sequences: true }));
  }

  // A consumer applies b1 and b2, commits b3 and stops before its ack,
  // holding b4 and b5 (the stalled one still holds a3 and a4).
  const crashing = await nats.dial();
  const got = await fetchN(crashing.js, stream, 5);
  assert.deepEqual(got.map(idOf), ["b1", "b2", "b3", "b4", "b5"]);
  for (const m of got.slice(0, 2)) assert.equal(await run(m), "applied", idOf(m));
  const r3 = await sink.consumer.apply(got[2]!.headers, sink.effect("b3"));
  assert.equal(r3.outcome, "applied");
  sink.record("b3", r3.outcome);
  await crashing.nc.close();
  await stalled.nc.close();

  // A resumes and publishes a5 with its old token.
  await publish(producerA.js, subject, "a5", a5);

  // A successor takes whatever comes: a5 at once, then after the ack wait
  // a3, a4, b3, b4 and b5 again. A strict guard sends a message that
  // arrives before the one it follows back (redeliver) until it fits.
  const successor = await nats.dial();
  const want: Record<string, Outcome> = { a3: "stale", a4: "stale", a5: "stale", b3: "duplicate", b4: "applied", b5: "applied" };
  const deadline = Date.now() + 30_000;
  for (let done = 0; done < Object.keys(want).length; ) {
    assert.ok(Date.now() < deadline, `${done} of ${Object.keys(want).length} messages settled within 30s`);
    for (const m of await fetchN(successor.js, stream, 1)) {
      const o = await run(m);
      assert.ok(idOf(m) in want, `unexpected ${idOf(m)}`);
      if (o !== "redeliver") {
        assert.equal(o, want[idOf(m)], idOf(m));
        done++;
      }
    }
  }

  await sink.check(["a1", "a2", "b1", "b2", "b3", "b4", "b5"], ["a3", "a4", "a5"], "A", leaseA.token, leaseB.token);
  const info = await jsm.consumers.info(stream, durable);
  assert.deepEqual([info.num_pending, info.num_ack_pending], [0, 0], "every message settled");
  assert.equal(await sink.guard.highest(scope), leaseB.token);
  await leaseB.release();
});

test("JetStream: malformed stamps are terminated, a failed effect is nacked and applied once", async (t) => {
  if (!(await requireService(t, "NATS", 4222)) || !(await requireService(t, "PostgreSQL", 5432))) return;
  const nats = new Nats();
  t.after(() => nats.close());
  const sink = new Sink();
  await sink.setUp();
  t.after(() => sink.close());
  const { jsm, stream, subject } = await nats.stream();
  const { nc, js } = await nats.dial();

  // JetStream's advisory of each terminated message names its stream sequence.
  const terminated: number[] = [];
  nc.subscribe(`$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.${stream}.${durable}`, {
    callback: (err, m) => void (err || terminated.push((m.json() as { stream_seq: number }).stream_seq)),
  });
  await nc.flush();

  const scope = unique("orders");
  const raw = (pairs: [string, string][]): MsgHdrs => {
    const h = headers();
    for (const [k, v] of pairs) h.append(k, v);
    return h;
  };
  const valid: [string, string][] = [["Fencing-Scope", scope], ["Fencing-Token", "5"]];
  const messages: [id: string, h: MsgHdrs | undefined][] = [
    ["no-headers", undefined],
    ["no-token", raw([["Fencing-Scope", scope]])],
    ["token-0", raw([["Fencing-Scope", scope], ["Fencing-Token", "0"]])],
    ["token-2^64", raw([["Fencing-Scope", scope], ["Fencing-Token", "18446744073709551616"]])],
    ["token-twice", raw([...valid, ["Fencing-Token", "5"]])],
    ["scope-twice", raw([...valid, ["Fencing-Scope", scope]])],
    ["scope-invalid", raw([["Fencing-Scope", "a\u200bb"], ["Fencing-Token", "5"]])],
    ["sequence-0", raw([...valid, ["Fencing-Sequence", "0"]])],
    ["sequence-2^63", raw([...valid, ["Fencing-Sequence", "9223372036854775808"]])],
    ["token-above-bigint", raw([["Fencing-Scope", scope], ["Fencing-Token", "9223372036854775808"]])], // PgGuard's range
    ["leading-zeros", raw([["Fencing-Scope", scope], ["Fencing-Token", "0005"], ["Fencing-Sequence", "01"]])],
    ["sequence-1", raw([...valid, ["Fencing-Sequence", "1"]])],
    ["flaky", raw([...valid, ["Fencing-Sequence", "2"]])],
  ];
  const seqs = new Map<string, number>();
  for (const [id, h] of messages) seqs.set(id, await publish(js, subject, id, h));
  const refused = messages.map(([id]) => id).filter((id) => id !== "sequence-1" && id !== "flaky");

  let failed = false;
  const deadline = Date.now() + 30_000;
  while (sink.outcomes("flaky").at(-1) !== "applied" || refused.some((id) => sink.outcomes(id).length === 0)) {
    assert.ok(Date.now() < deadline, "messages not settled within 30s");
    for (const m of await fetchN(js, stream, 1)) {
      const id = idOf(m);
      const r = await handle(sink.consumer, m, async (tx, s) => {
        await sink.effect(id)(tx, s);
        if (id === "flaky" && !failed) {
          failed = true;
          throw new Error("the effect failed after its write");
        }
      });
      assert.equal(r.settleError, undefined);
      sink.record(id, r.outcome);
    }
  }
  for (const id of refused) assert.deepEqual(sink.outcomes(id), ["refused"], id);
  assert.deepEqual(sink.outcomes("sequence-1"), ["applied"]);
  assert.deepEqual(sink.outcomes("flaky"), ["redeliver", "applied"]);
  assert.deepEqual(await sink.applied(), ["flaky", "sequence-1"]);

  // Every refused message was terminated (never delivered again), and nothing else.
  const until = Date.now() + 10_000;
  while (terminated.length < refused.length && Date.now() < until) await nc.flush();
  assert.deepEqual([...terminated].sort((x, y) => x - y), refused.map((id) => seqs.get(id)!));
  const info = await jsm.consumers.info(stream, durable);
  assert.deepEqual([info.num_pending, info.num_ack_pending], [0, 0], "every message settled");
});
