// The consumer side of the broker tests (amqp.test.ts, jetstream.test.ts),
// as internal/msgtest is for the Go ones: a MessageConsumer over PgGuard
// with strict sequences, whose effect is a row per message in the guard's
// transaction, and a record of every outcome, so that a test can check that
// no message was applied twice and none was lost.
import assert from "node:assert/strict";
import pg from "pg";
import { pgConfig, unique } from "./helpers.js";
import { PgGuard } from "../src/guards/pg.js";
import { MessageConsumer, type Outcome, type Stamp } from "../src/guards/messages.js";
import type { Decision } from "../src/index.js";

export class Sink {
  readonly pool = new pg.Pool(pgConfig);
  readonly guard: PgGuard;
  readonly consumer: MessageConsumer<pg.PoolClient>;
  readonly #effects = unique("fencemsg_effects").replace(/-/g, "_");
  readonly #outcomes = new Map<string, Outcome[]>();
  readonly stale: Decision[] = [];

  constructor() {
    this.guard = new PgGuard(this.pool, {
      table: unique("fencemsg_scopes").replace(/-/g, "_"),
      strictSequences: true,
      observer: { observe: (d) => void (!d.accepted && !d.duplicate && this.stale.push(d)) },
    });
    this.consumer = new MessageConsumer(this.guard);
  }

  async setUp(): Promise<void> {
    await this.guard.migrate();
    await this.pool.query(`CREATE TABLE "${this.#effects}" (id text NOT NULL, scope text NOT NULL, token bigint NOT NULL)`);
  }

  async close(): Promise<void> {
    await this.pool.query(`DROP TABLE IF EXISTS "${this.#effects}", "${this.guard.table}"`).catch(() => {});
    await this.pool.end();
  }

  /** The effect of message id: a row, written in the guard's transaction. */
  effect(id: string): (tx: pg.PoolClient, s: Stamp) => Promise<void> {
    return async (tx, s) => {
      await tx.query(`INSERT INTO "${this.#effects}" (id, scope, token) VALUES ($1, $2, $3)`, [id, s.scope, s.token.toString()]);
    };
  }

  record(id: string, o: Outcome): void {
    this.#outcomes.set(id, [...(this.#outcomes.get(id) ?? []), o]);
  }

  outcomes(id: string): Outcome[] {
    return this.#outcomes.get(id) ?? [];
  }

  /** The ids of the effect rows, sorted, one per row. */
  async applied(): Promise<string[]> {
    const { rows } = await this.pool.query(`SELECT id FROM "${this.#effects}" ORDER BY id`);
    return rows.map((r: { id: string }) => r.id);
  }

  /**
   * Asserts that exactly the messages in applied have an effect row, one
   * each; that every message in stale was last decided stale; and that the
   * guard's observer saw one stale rejection per stale delivery, of
   * staleOwner's token by highest.
   */
  async check(applied: string[], stale: string[], staleOwner: string, presented: bigint, highest: bigint): Promise<void> {
    assert.deepEqual(await this.applied(), [...applied].sort(), "effect rows: each applied message once, no other");
    let deliveries = 0;
    for (const id of stale) {
      const os = this.outcomes(id);
      assert.equal(os.at(-1), "stale", `message ${id}: outcomes ${os.join(",")}`);
      deliveries += os.filter((o) => o === "stale").length;
    }
    assert.equal(this.stale.length, deliveries, "stale rejections observed");
    for (const d of this.stale) {
      assert.deepEqual([d.owner, d.presented, d.highest], [staleOwner, presented, highest]);
    }
  }
}

/**
 * Deliveries pushed by a broker's callback, taken one at a time by a test
 * that waits for them (at most timeoutMs each).
 */
export class Inbox<M> {
  readonly #items: M[] = [];
  readonly #waiting: ((m: M) => void)[] = [];

  push(m: M): void {
    const w = this.#waiting.shift();
    if (w) w(m);
    else this.#items.push(m);
  }

  next(timeoutMs = 10_000): Promise<M> {
    const m = this.#items.shift();
    if (m !== undefined) return Promise.resolve(m);
    return new Promise((resolve, reject) => {
      const take = (x: M) => {
        clearTimeout(timer);
        resolve(x);
      };
      const timer = setTimeout(() => {
        this.#waiting.splice(this.#waiting.indexOf(take), 1);
        reject(new Error(`no delivery within ${timeoutMs}ms`));
      }, timeoutMs);
      this.#waiting.push(take);
    });
  }

  /** Deliveries that arrived and were not taken. */
  get pending(): number {
    return this.#items.length;
  }
}
