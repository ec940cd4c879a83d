// PostgreSQL guards over node-postgres, sharing the Go guard's (fencesql)
// table and statements exactly, so that a Go and a TypeScript writer of one
// scope see each other's tokens.
//
// Scope table (PgGuard): one row per scope holding the highest token
// accepted for it,
//
//   CREATE TABLE IF NOT EXISTS "fence_scopes" (
//       scope          varchar(512) PRIMARY KEY,
//       highest_token  bigint NOT NULL CHECK (highest_token >= 0),
//       sequence_token bigint NOT NULL DEFAULT 0,
//       last_sequence  bigint NOT NULL DEFAULT 0
//   )
//
// (the sequence columns serve writes with options.sequence, guard spec
// section 7; writes without one run only the statements below),
//
// check runs inside the caller's transaction:
//
//   SELECT highest_token FROM fence_scopes WHERE scope = $1 FOR UPDATE
//   -- no row: INSERT ... VALUES ($1, $2) ON CONFLICT (scope) DO NOTHING
//   --         (0 rows: a concurrent transaction created it; read again)
//   -- t < highest: stale, nothing written
//   -- t > highest: UPDATE fence_scopes SET highest_token = $1 WHERE scope = $2
//
// The row stays locked until the transaction ends, so the caller's writes
// commit or roll back together with the raised token, and no other check of
// the scope passes in between. Row-level tokens (RowFence): every row of a
// user table carries the token that last wrote it, and one UPDATE ... WHERE
// fence_token <= $t is the check.
//
// Non-guarantees: only writes in the checked transaction are fenced; a
// commit whose connection breaks has an unknown outcome (writes and token
// together); under REPEATABLE READ or SERIALIZABLE check may fail with a
// serialization error (40001), after which the whole transaction may be run
// again.

import type { ClientBase, Pool, PoolClient, QueryResult } from "pg";
import { CorruptTokenError, DuplicateError, RowNotFoundError, StaleTokenError, TokenOutOfRangeError } from "../errors.js";
import { checkSequence, checkToken } from "../scope.js";
import { type Decision, type FenceLease, type Guard, type Observer, reportStale, type WriteOptions } from "./guard.js";

/** The scope table's default name. */
export const DEFAULT_TABLE = "fence_scopes";
/** The row-level token column's default name. */
export const DEFAULT_TOKEN_COLUMN = "fence_token";

const MAX_INT64 = (1n << 63n) - 1n;

/** Something that runs queries: a pg Client, PoolClient or Pool. */
export interface Queryable {
  query(text: string, values?: unknown[]): Promise<QueryResult>;
}

function quoteIdent(name: string, what: string): string {
  if (!/^[A-Za-z_][A-Za-z0-9_]{0,62}$/.test(name)) {
    throw new TypeError(`invalid SQL identifier: ${what} ${JSON.stringify(name)}`);
  }
  return `"${name}"`;
}

function quoteTable(name: string): string {
  const parts = name.split(".");
  if (parts.length > 2) {
    throw new TypeError(`invalid SQL identifier: table ${JSON.stringify(name)}`);
  }
  return parts.map((p) => quoteIdent(p, "table")).join(".");
}

/** The token as a bind parameter: 1..2^63-1, the range of a bigint column. */
function tokenParam(scope: string, token: bigint): string {
  checkToken(scope, token, 0n);
  if (token > MAX_INT64) {
    throw new TokenOutOfRangeError(`fencing token ${token} is above 2^63-1, the largest a PostgreSQL bigint holds`);
  }
  return token.toString();
}

function tokenFromDB(v: unknown): bigint {
  const t = BigInt(v as string);
  if (t < 0n) {
    throw new CorruptTokenError(`negative token ${t} in the table, which no guard writes`);
  }
  return t;
}

export interface PgGuardOptions {
  /** The scope table, optionally "schema.table". Default "fence_scopes". */
  table?: string;
  /** Told of every rejection, and of the acceptances of do (after its commit). */
  observer?: Observer;
  /** Refuse a sequence other than last+1 under the same token (SequenceGapError). */
  strictSequences?: boolean;
}

/**
 * Enforces fencing tokens with a scope table in PostgreSQL. Holds no state
 * besides its configuration: any number of processes (in any language) may
 * guard the same table.
 */
export class PgGuard implements Guard<PoolClient> {
  readonly table: string;
  readonly createTableSQL: string;
  readonly #observer?: Observer;
  readonly #lock: string;
  readonly #insert: string;
  readonly #raise: string;
  readonly #highest: string;
  readonly #strict: boolean;
  // Sequenced writes (guard spec, section 7) read and write the sequence
  // columns too; writes without a sequence run only the statements above.
  readonly #seqLock: string;
  readonly #seqInsert: string;
  readonly #seqRaise: string;
  readonly #migrate: string[];

  constructor(
    private readonly pool: Pool,
    options: PgGuardOptions = {},
  ) {
    this.table = options.table ?? DEFAULT_TABLE;
    this.#observer = options.observer;
    const t = quoteTable(this.table);
    this.#strict = options.strictSequences ?? false;
    this.createTableSQL =
      `CREATE TABLE IF NOT EXISTS ${t} (\n` +
      "    scope          varchar(512) PRIMARY KEY,\n" +
      "    highest_token  bigint NOT NULL CHECK (highest_token >= 0),\n" +
      "    sequence_token bigint NOT NULL DEFAULT 0,\n" +
      "    last_sequence  bigint NOT NULL DEFAULT 0\n" +
      ")";
    this.#seqLock = `SELECT highest_token, sequence_token, last_sequence FROM ${t} WHERE scope = $1 FOR UPDATE`;
    this.#seqInsert = `INSERT INTO ${t} (scope, highest_token, sequence_token, last_sequence) VALUES ($1, $2, $2, $3) ON CONFLICT (scope) DO NOTHING`;
    this.#seqRaise = `UPDATE ${t} SET highest_token = $1, sequence_token = $2, last_sequence = $3 WHERE scope = $4`;
    // PostgreSQL's IF NOT EXISTS makes concurrent migrations safe.
    this.#migrate = ["sequence_token", "last_sequence"].map((c) => `ALTER TABLE ${t} ADD COLUMN IF NOT EXISTS ${c} BIGINT NOT NULL DEFAULT 0`);
    this.#lock = `SELECT highest_token FROM ${t} WHERE scope = $1 FOR UPDATE`;
    this.#insert = `INSERT INTO ${t} (scope, highest_token) VALUES ($1, $2) ON CONFLICT (scope) DO NOTHING`;
    this.#raise = `UPDATE ${t} SET highest_token = $1 WHERE scope = $2`;
    this.#highest = `SELECT highest_token FROM ${t} WHERE scope = $1`;
  }

  /**
   * Creates the scope table if it does not exist, and adds the sequence
   * columns to one created without them; guards without sequences keep
   * working on the migrated table (guard spec, section 7).
   */
  async migrate(): Promise<void> {
    await this.pool.query(this.createTableSQL);
    for (const stmt of this.#migrate) {
      await this.pool.query(stmt);
    }
  }

  /**
   * Decides, inside the caller's open transaction on client, whether token
   * may write to scope, and if so raises the scope's highest token to it;
   * returns the highest before. Throws StaleTokenError (nothing written)
   * when a higher token was accepted. After any error the caller must roll
   * back.
   */
  async check(client: Queryable, scope: string, token: bigint, options: WriteOptions = {}): Promise<bigint> {
    try {
      return await this.#check(client, scope, token, options.sequence ?? 0n);
    } catch (err) {
      this.#refused(err, scope, token, options);
      throw err;
    }
  }

  /** Tells the observer of a stale or duplicate refusal. */
  #refused(err: unknown, scope: string, token: bigint, options: WriteOptions): void {
    const d: Decision = { scope, presented: token, highest: 0n, accepted: false, owner: options.owner };
    if (options.sequence) d.sequence = options.sequence;
    if (err instanceof StaleTokenError) {
      this.#observer?.observe({ ...d, highest: err.highest });
    } else if (err instanceof DuplicateError) {
      this.#observer?.observe({ ...d, highest: token, duplicate: true });
    }
  }

  async #check(client: Queryable, scope: string, token: bigint, seq: bigint): Promise<bigint> {
    const tok = tokenParam(scope, token);
    checkSequence(scope, token, seq, 0n, 0n);
    if (seq !== 0n) {
      return this.#checkSequence(client, scope, token, tok, seq);
    }
    for (let i = 0; i < 3; i++) {
      const r = await client.query(this.#lock, [scope]);
      if (r.rows.length > 0) {
        const highest = tokenFromDB(r.rows[0].highest_token);
        checkToken(scope, token, highest);
        if (token > highest) {
          await client.query(this.#raise, [tok, scope]);
        }
        return highest;
      }
      const ins = await client.query(this.#insert, [scope, tok]);
      if (ins.rowCount === 1) {
        return 0n;
      }
    }
    throw new Error(`fencing scope ${JSON.stringify(scope)}: row keeps disappearing (deleted concurrently?)`);
  }

  async #checkSequence(client: Queryable, scope: string, token: bigint, tok: string, seq: bigint): Promise<bigint> {
    for (let i = 0; i < 3; i++) {
      const r = await client.query(this.#seqLock, [scope]);
      if (r.rows.length > 0) {
        const highest = tokenFromDB(r.rows[0].highest_token);
        // last_sequence counts only under the token it was recorded with: a
        // guard without sequences raises highest_token and leaves it behind.
        const st = BigInt(r.rows[0].sequence_token);
        let last = BigInt(r.rows[0].last_sequence);
        if (st !== highest || last < 0n) last = 0n;
        checkSequence(scope, token, seq, highest, last, this.#strict);
        await client.query(this.#seqRaise, [tok, tok, seq.toString(), scope]);
        return highest;
      }
      const ins = await client.query(this.#seqInsert, [scope, tok, seq.toString()]);
      if (ins.rowCount === 1) {
        return 0n;
      }
    }
    throw new Error(`fencing scope ${JSON.stringify(scope)}: row keeps disappearing (deleted concurrently?)`);
  }

  /** check for a lease: its key is the scope; a stale rejection marks it lost. */
  async checkLease(client: Queryable, lease: FenceLease, options: { sequence?: bigint } = {}): Promise<bigint> {
    try {
      return await this.check(client, lease.key, lease.token, { owner: lease.owner, ...options });
    } catch (err) {
      throw reportStale(lease, err);
    }
  }

  /**
   * Runs fn in a new transaction after check accepted token for scope, and
   * commits; rolls back if the check, fn or the commit fails, and rethrows.
   * fn must write through the client it is given and must not commit.
   */
  async do<T>(scope: string, token: bigint, fn: (client: PoolClient) => Promise<T>, options: WriteOptions = {}): Promise<T> {
    tokenParam(scope, token);
    const seq = options.sequence ?? 0n;
    checkSequence(scope, token, seq, 0n, 0n);
    const client = await this.pool.connect();
    let highest = 0n;
    let done = false;
    try {
      await client.query("BEGIN");
      highest = await this.#check(client, scope, token, seq);
      const result = await fn(client);
      await client.query("COMMIT");
      done = true;
      const d: Decision = { scope, presented: token, highest, accepted: true, owner: options.owner };
      if (seq !== 0n) d.sequence = seq;
      this.#observer?.observe(d);
      return result;
    } catch (err) {
      if (!done) {
        await client.query("ROLLBACK").catch(() => {});
      }
      this.#refused(err, scope, token, options);
      throw err;
    } finally {
      client.release();
    }
  }

  /** do for a lease: its key is the scope and its token the token; a stale rejection (the check's or fn's) marks it lost. */
  async doLease<T>(lease: FenceLease, fn: (client: PoolClient) => Promise<T>, options: { sequence?: bigint } = {}): Promise<T> {
    try {
      return await this.do(lease.key, lease.token, fn, { owner: lease.owner, ...options });
    } catch (err) {
      throw reportStale(lease, err);
    }
  }

  /** The highest token accepted for scope, 0 if none; the last committed value, without locking. */
  async highest(scope: string): Promise<bigint> {
    checkToken(scope, 1n, 0n);
    const r = await this.pool.query(this.#highest, [scope]);
    return r.rows.length > 0 ? tokenFromDB(r.rows[0].highest_token) : 0n;
  }
}

export interface RowFenceOptions {
  /** The user table whose rows carry a token column, optionally "schema.table". */
  table: string;
  /** The column that identifies a row (primary key or unique). Default "id". */
  idColumn?: string;
  /** The column holding the token that last wrote each row. Default "fence_token". */
  tokenColumn?: string;
  /** Told of every rejection. */
  observer?: Observer;
}

/**
 * Row-level tokens: an update goes through only with a token at least as
 * high as the row's. One statement, atomic by itself,
 *
 *   UPDATE "orders" SET "status" = $1, "fence_token" = $2
 *   WHERE "id" = $3 AND "fence_token" >= 0 AND "fence_token" <= $2
 *
 * and, when no row matched, a read of the row's token to tell why. Its scope
 * is the row ("table/id"). It cannot fence inserts or deletes.
 */
export class RowFence {
  readonly table: string;
  readonly idColumn: string;
  readonly tokenColumn: string;
  readonly #names: { table: string; id: string; token: string };
  readonly #observer?: Observer;

  constructor(options: RowFenceOptions) {
    this.table = options.table;
    this.idColumn = options.idColumn ?? "id";
    this.tokenColumn = options.tokenColumn ?? DEFAULT_TOKEN_COLUMN;
    if (this.idColumn === this.tokenColumn) {
      throw new TypeError(`invalid SQL identifier: id and token column are both ${JSON.stringify(this.idColumn)}`);
    }
    this.#names = {
      table: quoteTable(this.table),
      id: quoteIdent(this.idColumn, "column"),
      token: quoteIdent(this.tokenColumn, "column"),
    };
    this.#observer = options.observer;
  }

  /** ALTER TABLE ... ADD COLUMN fence_token BIGINT NOT NULL DEFAULT 0. */
  get addColumnSQL(): string {
    return `ALTER TABLE ${this.#names.table} ADD COLUMN ${this.#names.token} BIGINT NOT NULL DEFAULT 0`;
  }

  /**
   * Sets the columns of set on the row with id, with token, if the row's
   * token is not higher. Throws RowNotFoundError when there is no such row,
   * StaleTokenError (scope "table/id") when its token is higher.
   */
  async update(q: Queryable, id: unknown, token: bigint, set: Record<string, unknown>, options: { owner?: string } = {}): Promise<void> {
    const scope = `${this.table}/${String(id)}`;
    const tok = tokenParam(scope, token);
    const cols = Object.keys(set);
    const args: unknown[] = [];
    let sql = `UPDATE ${this.#names.table} SET `;
    for (const c of cols) {
      if (c === this.tokenColumn) {
        throw new TypeError(`${JSON.stringify(c)} is the token column; update sets it`);
      }
      args.push(set[c]);
      sql += `${quoteIdent(c, "column")} = $${args.length}, `;
    }
    args.push(tok);
    const t = `$${args.length}`;
    args.push(id);
    const { id: idCol, token: tokCol, table } = this.#names;
    sql += `${tokCol} = ${t} WHERE ${idCol} = $${args.length} AND ${tokCol} >= 0 AND ${tokCol} <= ${t}`;
    const read = `SELECT ${tokCol} AS t FROM ${table} WHERE ${idCol} = $1 FOR UPDATE`;
    for (let i = 0; i < 3; i++) {
      const r = await q.query(sql, args);
      if ((r.rowCount ?? 0) > 0) {
        return;
      }
      const row = await q.query(read, [id]);
      if (row.rows.length === 0) {
        throw new RowNotFoundError(`fencing: no row ${scope}`);
      }
      const highest = tokenFromDB(row.rows[0].t);
      if (highest > token) {
        this.#observer?.observe({ scope, presented: token, highest, accepted: false, owner: options.owner });
        throw new StaleTokenError(scope, token, highest);
      }
    }
    throw new Error(`fencing: update ${scope}: row changed concurrently on every attempt`);
  }

  /** update with the lease's token; a stale rejection marks the lease lost. */
  async updateLease(q: Queryable, id: unknown, lease: FenceLease, set: Record<string, unknown>): Promise<void> {
    try {
      await this.update(q, id, lease.token, set, { owner: lease.owner });
    } catch (err) {
      throw reportStale(lease, err);
    }
  }
}

export type { ClientBase, Pool, PoolClient };
