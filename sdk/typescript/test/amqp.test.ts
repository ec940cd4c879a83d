// The message fence against the real RabbitMQ and PostgreSQL (guard spec,
// section 8), as fence/fencemsg/fenceamqp's tests do in Go: a paused
// producer's queued messages are refused after the new holder's were
// applied, a message redelivered after its commit is a duplicate, malformed
// stamps are dead-lettered, a failed effect is requeued, and no message is
// lost.
import { test } from "node:test";
import assert from "node:assert/strict";
import amqplib, { type Channel, type ChannelModel, type ConfirmChannel, type ConsumeMessage } from "amqplib";
import { amqpURL as url, requireService, startFenced, unique } from "./helpers.js";
import { Inbox, Sink } from "./msgsink.js";
import { handle, publishOptions } from "../src/guards/amqp.js";
import { leaseStamp, type Outcome, type Stamp } from "../src/guards/messages.js";
import { Client } from "../src/index.js";

/** One process's connection: closing it is that process stopping, and RabbitMQ requeues what it held unacked. */
interface Conn<Ch extends Channel = Channel> {
  conn: ChannelModel;
  ch: Ch;
}

async function dial(): Promise<Conn> {
  const conn = await amqplib.connect(url);
  conn.on("error", () => {}); // a closed connection is what the tests do on purpose
  const ch = await conn.createChannel();
  ch.on("error", () => {});
  return { conn, ch };
}

async function dialConfirm(): Promise<Conn<ConfirmChannel>> {
  const conn = await amqplib.connect(url);
  conn.on("error", () => {});
  const ch = await conn.createConfirmChannel();
  return { conn, ch };
}

/** Consumes queue without auto-ack, holding at most prefetch deliveries unacked. */
async function consume(c: Conn, queue: string, prefetch: number): Promise<{ inbox: Inbox<ConsumeMessage>; tag: string }> {
  const inbox = new Inbox<ConsumeMessage>();
  await c.ch.prefetch(prefetch);
  const { consumerTag } = await c.ch.consume(queue, (m) => m && inbox.push(m), { noAck: false });
  return { inbox, tag: consumerTag };
}

/** Publishes one message stamped with s (or with raw headers) and waits for the broker's confirm. */
async function publish(p: Conn<ConfirmChannel>, queue: string, id: string, s: Stamp | { headers: Record<string, unknown> }): Promise<void> {
  const base = { messageId: id, persistent: true };
  const options = "headers" in s ? { ...base, headers: s.headers } : publishOptions(s, base);
  p.ch.publish("", queue, Buffer.from(id), options);
  await p.ch.waitForConfirms();
}

const idOf = (m: ConsumeMessage): string => m.properties.messageId as string;

test("RabbitMQ: a paused producer's messages are acked as stale after the new holder's; a copy after a commit is a duplicate; none lost", async (t) => {
  if (!(await requireService(t, "RabbitMQ", 5672)) || !(await requireService(t, "PostgreSQL", 5432))) return;
  const sink = new Sink();
  await sink.setUp();
  t.after(() => sink.close());
  const f = await startFenced();
  t.after(() => f.stop());
  const a = new Client({ endpoints: f.url, owner: "A" });
  const b = new Client({ endpoints: f.url, owner: "B" });
  t.after(() => Promise.all([a.close(), b.close()]));
  const conns: Conn<Channel>[] = [];
  t.after(() => Promise.all(conns.map((c) => c.conn.close().catch(() => {}))));
  const dialed = async () => {
    const c = await dial();
    conns.push(c);
    return c;
  };
  const confirmed = async () => {
    const c = await dialConfirm();
    conns.push(c);
    return c;
  };

  const admin = await dial();
  const queue = unique("fencemsg");
  t.after(async () => {
    await admin.ch.deleteQueue(queue).catch(() => {});
    await admin.conn.close().catch(() => {});
  });
  await admin.ch.assertQueue(queue, { durable: true });

  const scope = unique("orders");
  const leaseA = await a.acquire(scope, { ttlMs: 1000 });
  const producerA = await confirmed();
  const run = async (ch: Channel, m: ConsumeMessage): Promise<Outcome> => {
    const r = await handle(sink.consumer, ch, m, sink.effect(idOf(m)));
    assert.equal(r.settleError, undefined);
    sink.record(idOf(m), r.outcome);
    return r.outcome;
  };

  // A consumer that will stall takes A's four messages, applies two and
  // holds the others unacked.
  const stalled = await dialed();
  const s1 = await consume(stalled, queue, 10);
  for (const id of ["a1", "a2", "a3", "a4"]) {
    await publish(producerA, queue, id, leaseStamp(leaseA, { sequences: true }));
  }
  const a5 = leaseStamp(leaseA, { sequences: true }); // stamped, then A pauses before publishing it
  for (const want of ["a1", "a2"]) {
    const m = await s1.inbox.next();
    assert.equal(idOf(m), want);
    assert.equal(await run(stalled.ch, m), "applied");
  }
  const held = [await s1.inbox.next(), await s1.inbox.next()];
  assert.deepEqual(held.map(idOf), ["a3", "a4"]);
  await stalled.ch.cancel(s1.tag); // it stalls, still holding a3 and a4

  // A pauses: no renewals. B, waiting, gets the key after A's TTL with a higher token.
  leaseA.orphan();
  const leaseB = await b.acquire(scope, { waitMs: 10_000 });
  assert.ok(leaseB.token > leaseA.token);
  const producerB = await confirmed();
  for (const id of ["b1", "b2", "b3", "b4", "b5"]) {
    await publish(producerB, queue, id, leaseStamp(leaseB, { sequences: true }));
  }

  // A consumer applies b1 and b2, commits b3 and stops before its ack, holding b4 and b5.
  const crashing = await dialed();
  const s2 = await consume(crashing, queue, 10);
  for (const want of ["b1", "b2"]) {
    const m = await s2.inbox.next();
    assert.equal(idOf(m), want);
    assert.equal(await run(crashing.ch, m), "applied");
  }
  const b3 = await s2.inbox.next();
  assert.equal(idOf(b3), "b3");
  const r3 = await sink.consumer.apply(b3.properties.headers, sink.effect("b3"));
  assert.equal(r3.outcome, "applied");
  sink.record("b3", r3.outcome);
  assert.equal(idOf(await s2.inbox.next()), "b4");
  await crashing.conn.close();

  // Its successor gets b3 again (a duplicate), then b4 and b5.
  const successor = await dialed();
  const s3 = await consume(successor, queue, 10);
  for (const [want, o] of [["b3", "duplicate"], ["b4", "applied"], ["b5", "applied"]] as const) {
    const m = await s3.inbox.next();
    assert.equal(idOf(m), want);
    assert.equal(await run(successor.ch, m), o, want);
  }

  // The stalled consumer stops: RabbitMQ delivers a3 and a4 again, and A
  // resumes and publishes a5 with its old token. All three are stale.
  await stalled.conn.close();
  await publish(producerA, queue, "a5", a5);
  for (const want of ["a3", "a4", "a5"]) {
    const m = await s3.inbox.next();
    assert.equal(idOf(m), want);
    assert.equal(await run(successor.ch, m), "stale", want);
  }

  await sink.check(["a1", "a2", "b1", "b2", "b3", "b4", "b5"], ["a3", "a4", "a5"], "A", leaseA.token, leaseB.token);
  await successor.ch.close(); // anything it held unacked would be back in the queue
  assert.equal(s3.inbox.pending, 0);
  assert.equal((await admin.ch.checkQueue(queue)).messageCount, 0, "every message settled");
  assert.equal(await sink.guard.highest(scope), leaseB.token);
  await leaseB.release();
});

test("RabbitMQ: malformed stamps are rejected without requeue (dead-lettered), a failed effect is requeued and applied once", async (t) => {
  if (!(await requireService(t, "RabbitMQ", 5672)) || !(await requireService(t, "PostgreSQL", 5432))) return;
  const sink = new Sink();
  await sink.setUp();
  t.after(() => sink.close());
  const admin = await dial();
  const queue = unique("fencemsg");
  const dlq = `${queue}-dead`;
  t.after(async () => {
    await admin.ch.deleteQueue(queue).catch(() => {});
    await admin.ch.deleteQueue(dlq).catch(() => {});
    await admin.conn.close().catch(() => {});
  });
  await admin.ch.assertQueue(dlq, { durable: false });
  await admin.ch.assertQueue(queue, { durable: false, deadLetterExchange: "", deadLetterRoutingKey: dlq });

  const scope = unique("orders");
  const valid = { "Fencing-Scope": scope, "Fencing-Token": "5" };
  const messages: [id: string, headers: Record<string, unknown>][] = [
    ["no-stamp", { Other: "x" }],
    ["token-0", { ...valid, "Fencing-Token": "0" }],
    ["token-2^64", { ...valid, "Fencing-Token": "18446744073709551616" }],
    ["token-number", { ...valid, "Fencing-Token": 5 }],
    ["scope-table", { ...valid, "Fencing-Scope": { key: scope } }],
    ["scope-invalid", { ...valid, "Fencing-Scope": "a\u0000b" }],
    ["sequence-0", { ...valid, "Fencing-Sequence": "0" }],
    ["sequence-2^63", { ...valid, "Fencing-Sequence": "9223372036854775808" }],
    ["token-above-bigint", { ...valid, "Fencing-Token": "9223372036854775808" }], // PgGuard's range
    ["token-leading-zero", { ...valid, "Fencing-Token": "05" }],
    ["bytes", { "Fencing-Scope": Buffer.from(scope), "Fencing-Token": Buffer.from("5"), "Fencing-Sequence": Buffer.from("1") }],
    ["flaky", { ...valid, "Fencing-Sequence": "2" }],
  ];
  const refused = messages.map(([id]) => id).filter((id) => id !== "bytes" && id !== "flaky");
  const producer = await dialConfirm();
  t.after(() => producer.conn.close().catch(() => {}));
  for (const [id, headers] of messages) await publish(producer, queue, id, { headers });

  // One delivery at a time: the flaky message's first effect writes, then fails.
  const c = await dial();
  t.after(() => c.conn.close().catch(() => {}));
  const { inbox } = await consume(c, queue, 1);
  let failed = false;
  const want = [...messages.map(([id]) => id), "flaky"];
  for (const id of want) {
    const m = await inbox.next();
    assert.equal(idOf(m), id);
    const r = await handle(sink.consumer, c.ch, m, async (tx, s) => {
      await sink.effect(id)(tx, s);
      if (id === "flaky" && !failed) {
        failed = true;
        throw new Error("the effect failed after its write");
      }
    });
    assert.equal(r.settleError, undefined);
    sink.record(id, r.outcome);
  }
  for (const id of refused) assert.deepEqual(sink.outcomes(id), ["refused"], id);
  assert.deepEqual(sink.outcomes("bytes"), ["applied"]);
  assert.deepEqual(sink.outcomes("flaky"), ["redeliver", "applied"]);
  assert.deepEqual(await sink.applied(), ["bytes", "flaky"]);

  // Every refused message is in the dead-letter queue, rejected, none requeued.
  const dead = await consume(c, dlq, 100);
  const got: string[] = [];
  for (let i = 0; i < refused.length; i++) {
    const m = await dead.inbox.next();
    const death = (m.properties.headers?.["x-death"] ?? [])[0];
    assert.equal(death?.reason, "rejected", idOf(m));
    assert.equal(death?.queue, queue);
    got.push(idOf(m));
    c.ch.ack(m);
  }
  assert.deepEqual(got, refused);
  await c.ch.close();
  assert.equal(dead.inbox.pending, 0);
  assert.equal((await admin.ch.checkQueue(queue)).messageCount, 0, "every message settled");
  assert.equal((await admin.ch.checkQueue(dlq)).messageCount, 0, "no other message dead-lettered");
});
