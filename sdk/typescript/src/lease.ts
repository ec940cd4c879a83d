import { LeaseLostError, LeaseReleasedError, NotHeldError } from "./errors.js";

/** @internal What a Lease needs from its client. */
export interface LeaseHost {
  readonly requestTimeoutMs: number;
  /** Renews once, over the stream or unary; by is the lease's local deadline (the host's clock, ms) or 0. */
  renew(key: string, leaseId: string, by: number, timeoutMs: number): Promise<{ signature: string }>;
  release(key: string, leaseId: string, options: { timeoutMs: number }): Promise<void>;
  /** Sends the one best-effort Release of a lost lease, in the background. */
  releaseLost(key: string, leaseId: string): void;
  /** The monotonic clock of the deadlines, in ms (performance.now unless a test gives its own). */
  now(): number;
  /** The time an answered Acquire or Renew sent at sent proves the lease from: sent (a seam for the torture mutant). */
  proofTime(sent: number): number;
  holdRenewals(l: Lease): void;
  dropRenewals(l: Lease): void;
}

export interface LeaseInfo {
  key: string;
  /** Set only for the holder (Acquire, Renew); empty in Get, List and Watch. */
  leaseId: string;
  owner: string;
  token: bigint;
  ttlMs: number;
  /** Milliseconds until expiry as the server saw it when it answered. */
  remainingMs: number;
}

/**
 * A held lease that renews itself until released or lost.
 *
 * Its `signal` aborts the moment the client can no longer be sure it holds
 * the lease (a renewal was refused, the local deadline passed without a
 * successful renewal, markLost was called, for example by a guard helper
 * after a stale rejection) with a LeaseLostError, and on release with a
 * LeaseReleasedError. Reading `signal`, `held` or calling `throwIfLost()`
 * also compares the clock with the local deadline, so a process whose event
 * loop was blocked past it sees the loss before the timer fires.
 *
 * After a loss the client sends one Release in the background, bounded by
 * the request timeout; the server ends a lease only for its own ID, so this
 * never ends a newer holder's lease. A lost lease never comes back.
 */
export class Lease implements AsyncDisposable {
  readonly key: string;
  readonly leaseId: string;
  readonly owner: string;
  /** The fencing token to present with every write. */
  readonly token: bigint;
  /** The granted TTL in milliseconds. */
  readonly ttlMs: number;
  /** The server's signature of the token (token signing on), else "". */
  signature: string;

  readonly #host: LeaseHost;
  readonly #interval: number;
  readonly #window: number;
  readonly #ac = new AbortController();
  readonly #lost: Promise<LeaseLostError>;
  #resolveLost!: (e: LeaseLostError) => void;
  #deadline = 0;
  #expiry: NodeJS.Timeout | undefined;
  #renewal: NodeJS.Timeout | undefined;
  #stopped = false;

  /** @internal */
  constructor(host: LeaseHost, info: LeaseInfo, signature: string, intervalMs: number, windowMs: number) {
    this.key = info.key;
    this.leaseId = info.leaseId;
    this.owner = info.owner;
    this.token = info.token;
    this.ttlMs = info.ttlMs;
    this.signature = signature;
    this.#host = host;
    this.#interval = intervalMs;
    this.#window = windowMs;
    this.#lost = new Promise((r) => (this.#resolveLost = r));
    host.holdRenewals(this);
  }

  /** Aborted when the lease is lost (reason: LeaseLostError) or released (LeaseReleasedError). */
  get signal(): AbortSignal {
    this.#checkDeadline();
    return this.#ac.signal;
  }

  /** Resolves with the LeaseLostError when the lease is lost; never after a release. */
  get lost(): Promise<LeaseLostError> {
    return this.#lost;
  }

  /** True while the lease is certainly held. */
  get held(): boolean {
    return !this.signal.aborted;
  }

  /** Throws the signal's reason once the lease is lost or released. */
  throwIfLost(): void {
    this.signal.throwIfAborted();
  }

  /**
   * The local conservative deadline on the client's monotonic clock (performance.now()): the send
   * time of the last successful renewal (or of the Acquire) plus the TTL less
   * the drift margin.
   */
  get deadline(): number {
    return this.#deadline;
  }

  /** Milliseconds left before the local deadline (0 once lost or released). */
  get remainingMs(): number {
    return this.held ? Math.max(this.#deadline - this.#host.now(), 0) : 0;
  }

  /**
   * Marks the lease lost, for example after a resource rejected its token as
   * stale. The lease stops renewing and is released in the background.
   */
  #sequence = 0n;

  /**
   * The sequence for the next write under this lease's token: 1n on the
   * first call, then 2n, 3n... (a lease has one token; a new one starts at
   * 1n). Pass it to a guard's write as options.sequence, and the same one
   * again when retrying that write: guards refuse a copy of it as a
   * DuplicateError (guard spec, section 7).
   */
  nextSequence(): bigint {
    this.#sequence += 1n;
    return this.#sequence;
  }

  markLost(cause?: unknown): void {
    this.#lose("reported lost", cause);
  }

  /**
   * Stops renewing and aborts the signal (a LeaseLostError) without
   * releasing: the server keeps the lease until its TTL runs out. For
   * hand-offs and for tests that stand in for a paused holder.
   */
  orphan(): void {
    if (this.#halt()) {
      const e = new LeaseLostError(this.key, this.token, "orphaned, no longer renewed");
      this.#ac.abort(e);
      this.#resolveLost(e);
    }
  }

  /**
   * Gives the lease up. The signal aborts before the request is sent, so no
   * write races the release. NotHeldError: the lease had already ended on
   * the server (expired, or the background release after a loss got there
   * first). A release whose answer was lost and whose retry at another
   * endpoint finds the lease gone resolves: released or expired, the lease
   * is gone (see Client.release).
   */
  async release(): Promise<void> {
    this.#halt();
    if (!this.#ac.signal.aborted) {
      this.#ac.abort(new LeaseReleasedError(this.key, this.token));
    }
    await this.#host.release(this.key, this.leaseId, { timeoutMs: this.#host.requestTimeoutMs });
  }

  /** For `await using`: releases a lease that has not ended; a lease the server no longer holds is not an error here. */
  async [Symbol.asyncDispose](): Promise<void> {
    if (this.#ac.signal.aborted) {
      return;
    }
    try {
      await this.release();
    } catch (err) {
      if (!(err instanceof NotHeldError)) {
        throw err;
      }
    }
  }

  /** @internal Sets the local deadline to sent + window and starts renewing. */
  start(sent: number): void {
    this.#deadline = sent + this.#window;
    this.#expiry = setTimeout(() => this.#checkDeadline(), Math.max(this.#deadline - this.#host.now(), 0));
    this.#renewal = setTimeout(() => void this.#renewDue(), this.#jittered());
  }

  /** @internal Renews once; returns the send time. */
  async renewOnce(): Promise<number> {
    const sent = this.#host.now();
    const { signature } = await this.#host.renew(this.key, this.leaseId, this.#deadline, this.#host.requestTimeoutMs);
    if (signature !== "") {
      this.signature = signature;
    }
    return this.#host.proofTime(sent);
  }

  /** @internal Ends the lease with a LeaseLostError, then releases it in the background, once. */
  lose(reason: string, cause?: unknown): void {
    this.#lose(reason, cause);
  }

  #lose(reason: string, cause?: unknown): void {
    if (!this.#halt()) {
      return;
    }
    const e = new LeaseLostError(this.key, this.token, reason + (cause === undefined ? "" : `: ${String(cause)}`), { cause });
    this.#ac.abort(e);
    this.#resolveLost(e);
    this.#host.releaseLost(this.key, this.leaseId);
  }

  #checkDeadline(): void {
    if (!this.#stopped && this.#deadline > 0 && this.#host.now() >= this.#deadline) {
      this.#lose("local deadline passed without a successful renewal");
    }
  }

  /** Stops renewals and the deadline timer; reports whether this call stopped them. */
  #halt(): boolean {
    if (this.#stopped) {
      return false;
    }
    this.#stopped = true;
    clearTimeout(this.#expiry);
    clearTimeout(this.#renewal);
    this.#host.dropRenewals(this);
    return true;
  }

  /**
   * Sends the renewal that is due, then schedules the next: after the
   * interval (jittered) when it succeeded, soon when it failed for a
   * transport error, which is retried until the local deadline passes. A
   * refused renewal loses the lease at once.
   */
  async #renewDue(): Promise<void> {
    let wait: number;
    try {
      const sent = await this.renewOnce();
      // A deadline that passed while the renewal was in flight loses the
      // lease, even though the renewal succeeded.
      this.#checkDeadline();
      if (this.#stopped) {
        return;
      }
      const d = sent + this.#window;
      if (d > this.#deadline) {
        this.#deadline = d;
        clearTimeout(this.#expiry);
        this.#expiry = setTimeout(() => this.#checkDeadline(), Math.max(d - this.#host.now(), 0));
      }
      wait = this.#jittered();
    } catch (err) {
      if (err instanceof NotHeldError) {
        this.#lose("renewal refused", err);
        return;
      }
      wait = Math.min(this.#interval / 4, 250);
    }
    this.#checkDeadline();
    if (!this.#stopped) {
      this.#renewal = setTimeout(() => void this.#renewDue(), wait);
    }
  }

  #jittered(): number {
    return this.#interval - Math.random() * (this.#interval / 10);
  }
}
