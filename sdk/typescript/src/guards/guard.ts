// What every guard shares: the decision it reports to observers, the lease
// it may be given, and the in-memory guard.

import { DuplicateError, StaleTokenError } from "../errors.js";
import { checkSequence, nextLast } from "../scope.js";

/** One decision of a guard, as observers see it. */
export interface Decision {
  scope: string;
  presented: bigint;
  /** The highest token accepted for the scope before this decision (0: none). */
  highest: bigint;
  accepted: boolean;
  /** The owner the write came with, when known (Fencing-Owner, or the lease's). */
  owner?: string;
  /** The write's sequence (guard spec, section 7), when it had one. */
  sequence?: bigint;
  /** A duplicate of a write already applied: not accepted, and not stale either. */
  duplicate?: boolean;
}

/** Per-write options of the guards: the owner (informational) and the write's sequence. */
export interface WriteOptions {
  owner?: string;
  /** The write's sequence under its token (1..2^63-1); absent or 0n: none. */
  sequence?: bigint;
}

/** Told of a guard's decisions. observe must not throw or block. */
export interface Observer {
  observe(d: Decision): void;
}

/** The holder's side of a lease, as guards use it: a Lease satisfies it. */
export interface FenceLease {
  readonly key: string;
  readonly token: bigint;
  readonly owner?: string;
  readonly signature?: string;
  markLost(cause?: unknown): void;
  /** The next sequence for a write under this lease (1, 2, ...), when the lease numbers its writes. */
  nextSequence?(): bigint;
}

/**
 * A guard that runs a mutation only if its token is at least the highest
 * accepted for its scope, and then records it (invariant I5), with check,
 * mutation and record atomic with respect to other mutations of the scope.
 * C is what apply gets: for PgGuard the client of the open transaction.
 */
export interface Guard<C = void> {
  do<T>(scope: string, token: bigint, apply: (ctx: C) => Promise<T>, options?: WriteOptions): Promise<T>;
  highest(scope: string): Promise<bigint>;
}

/** Calls lease.markLost when err is a StaleTokenError (invariant I7), then returns err. */
export function reportStale(lease: FenceLease, err: unknown): unknown {
  if (err instanceof StaleTokenError) {
    lease.markLost(err);
  }
  return err;
}

/** Runs fn and reports a stale rejection to the lease before rethrowing it. */
export async function withLease<T>(lease: FenceLease, fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    throw reportStale(lease, err);
  }
}

/**
 * A guard that keeps the highest tokens in this process's memory, for data
 * that lives there too. Mutations of one scope run one at a time. Nothing
 * survives the process: it protects only what dies with it.
 */
export class MemoryGuard implements Guard<void> {
  readonly #highest = new Map<string, bigint>();
  readonly #last = new Map<string, bigint>();
  readonly #tails = new Map<string, Promise<unknown>>();

  /** strictSequences: refuse a sequence other than last+1 under the same token (SequenceGapError). */
  constructor(
    private readonly observer?: Observer,
    private readonly options: { strictSequences?: boolean } = {},
  ) {}

  async do<T>(scope: string, token: bigint, apply: (ctx: void) => Promise<T>, options: WriteOptions = {}): Promise<T> {
    const seq = options.sequence ?? 0n;
    checkSequence(scope, token, seq, 0n, 0n);
    const prev = this.#tails.get(scope) ?? Promise.resolve();
    let release!: () => void;
    const mine = new Promise<void>((r) => (release = r));
    const tail = prev.then(() => mine);
    this.#tails.set(scope, tail);
    await prev;
    try {
      const highest = this.#highest.get(scope) ?? 0n;
      const last = this.#last.get(scope) ?? 0n;
      const d: Decision = { scope, presented: token, highest, accepted: false, owner: options.owner };
      if (seq !== 0n) d.sequence = seq;
      try {
        checkSequence(scope, token, seq, highest, last, this.options.strictSequences);
      } catch (err) {
        if (err instanceof StaleTokenError || err instanceof DuplicateError) {
          if (err instanceof DuplicateError) d.duplicate = true;
          this.observer?.observe(d);
        }
        throw err;
      }
      const result = await apply();
      this.#last.set(scope, nextLast(token, seq, highest, last));
      if (token > highest) {
        this.#highest.set(scope, token);
      }
      this.observer?.observe({ ...d, accepted: true });
      return result;
    } finally {
      release();
      if (this.#tails.get(scope) === tail) {
        this.#tails.delete(scope);
      }
    }
  }

  async highest(scope: string): Promise<bigint> {
    return this.#highest.get(scope) ?? 0n;
  }
}
