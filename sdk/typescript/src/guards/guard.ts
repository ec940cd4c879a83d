// What every guard shares: the decision it reports to observers, the lease
// it may be given, and the in-memory guard.

import { StaleTokenError } from "../errors.js";
import { checkToken } from "../scope.js";

/** One decision of a guard, as observers see it. */
export interface Decision {
  scope: string;
  presented: bigint;
  /** The highest token accepted for the scope before this decision (0: none). */
  highest: bigint;
  accepted: boolean;
  /** The owner the write came with, when known (Fencing-Owner, or the lease's). */
  owner?: string;
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
}

/**
 * A guard that runs a mutation only if its token is at least the highest
 * accepted for its scope, and then records it (invariant I5), with check,
 * mutation and record atomic with respect to other mutations of the scope.
 * C is what apply gets: for PgGuard the client of the open transaction.
 */
export interface Guard<C = void> {
  do<T>(scope: string, token: bigint, apply: (ctx: C) => Promise<T>, options?: { owner?: string }): Promise<T>;
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
  readonly #tails = new Map<string, Promise<unknown>>();

  constructor(private readonly observer?: Observer) {}

  async do<T>(scope: string, token: bigint, apply: () => Promise<T>, options: { owner?: string } = {}): Promise<T> {
    checkToken(scope, token, 0n);
    const prev = this.#tails.get(scope) ?? Promise.resolve();
    let release!: () => void;
    const mine = new Promise<void>((r) => (release = r));
    const tail = prev.then(() => mine);
    this.#tails.set(scope, tail);
    await prev;
    try {
      const highest = this.#highest.get(scope) ?? 0n;
      try {
        checkToken(scope, token, highest);
      } catch (err) {
        this.observer?.observe({ scope, presented: token, highest, accepted: false, owner: options.owner });
        throw err;
      }
      const result = await apply();
      if (token > highest) {
        this.#highest.set(scope, token);
      }
      this.observer?.observe({ scope, presented: token, highest, accepted: true, owner: options.owner });
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
