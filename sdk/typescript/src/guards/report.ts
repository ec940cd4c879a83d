// A Reporter sends the stale rejections a guard makes to fenced
// (RejectionService.ReportRejections), so that the lease service can show
// whose epoch was fenced off by whose. Give it to a guard as its observer.
//
// Guarantees: observe never waits for the network and never throws; memory
// is bounded (at most queueSize entries wait; identical rejections share
// one entry with a count); sent + dropped + pending counts every rejection
// observed. Non-guarantees: reports are best effort: a full queue drops new
// rejections, and a batch fenced does not accept is dropped, not retried.
// Accepted writes are not reported.

import type { StaleRejection } from "../client.js";
import type { Decision, Observer } from "./guard.js";

/** Delivers a batch to fenced; a Client satisfies it. */
export interface Sender {
  reportRejections(rs: StaleRejection[], options?: { timeoutMs?: number }): Promise<bigint>;
}

export interface ReporterOptions {
  /** Names the resource whose guard reports ("orders-db"): 1 to 128 bytes of printable text. */
  resource: string;
  sender: Sender;
  /** Entries waiting to be sent, at most. Default 4096. */
  queueSize?: number;
  /** Entries per call, at most 1000. Default 500. */
  batchSize?: number;
  /** How long rejections wait for company before they are sent. Default 1000 ms. */
  flushIntervalMs?: number;
  /** Bounds each call. Default 5000 ms. */
  sendTimeoutMs?: number;
}

export class Reporter implements Observer {
  sent = 0;
  dropped = 0;
  readonly #o: Required<ReporterOptions>;
  #pending = new Map<string, StaleRejection>();
  #timer: NodeJS.Timeout | undefined;
  #sending: Promise<void> = Promise.resolve();
  #closed = false;
  #wait: number; // the delay before the next send: the flush interval, longer while sends fail

  constructor(options: ReporterOptions) {
    this.#o = { queueSize: 4096, batchSize: 500, flushIntervalMs: 1000, sendTimeoutMs: 5000, ...options };
    const r = this.#o.resource;
    if (!r || Buffer.byteLength(r) > 128 || !/^[\p{L}\p{M}\p{N}\p{P}\p{S}\p{Zs}]+$/u.test(r)) {
      throw new TypeError(`fencereport: resource ${JSON.stringify(r)} must be 1 to 128 bytes of printable text`);
    }
    if (!(this.#o.batchSize >= 1 && this.#o.batchSize <= 1000)) throw new TypeError(`fencereport: batchSize ${this.#o.batchSize} is outside 1..1000`);
    this.#wait = this.#o.flushIntervalMs;
    if (!(this.#o.queueSize >= 1)) throw new TypeError(`fencereport: queueSize ${this.#o.queueSize} is below 1`);
  }

  /** Entries waiting to be sent. */
  get pending(): number {
    return this.#pending.size;
  }

  observe(d: Decision): void {
    if (d.accepted || d.presented >= d.highest) return;
    const k = `${d.scope}\u0000${d.presented}\u0000${d.highest}\u0000${d.owner ?? ""}`;
    const e = this.#pending.get(k);
    if (this.#closed || (!e && this.#pending.size >= this.#o.queueSize)) {
      this.dropped++;
      return;
    }
    if (e) {
      e.count = (e.count ?? 1) + 1;
    } else {
      this.#pending.set(k, { scope: d.scope, presented: d.presented, highest: d.highest, owner: d.owner, resource: this.#o.resource, count: 1 });
    }
    if (this.#pending.size >= this.#o.batchSize && this.#wait === this.#o.flushIntervalMs) {
      void this.flush();
    } else if (!this.#timer) {
      // While fenced does not answer, try less often (doubling up to a minute).
      this.#timer = setTimeout(() => void this.flush(), this.#wait);
      this.#timer.unref();
    }
  }

  /** Sends what is queued now; resolves when it was sent or dropped. */
  flush(): Promise<void> {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    const taken = [...this.#pending.values()];
    this.#pending = new Map();
    this.#sending = this.#sending.then(async () => {
      let failed = false;
      for (let i = 0; i < taken.length; i += this.#o.batchSize) {
        const batch = taken.slice(i, i + this.#o.batchSize);
        const n = batch.reduce((s, e) => s + (e.count ?? 1), 0);
        try {
          await this.#o.sender.reportRejections(batch, { timeoutMs: this.#o.sendTimeoutMs });
          this.sent += n;
        } catch {
          this.dropped += n;
          failed = true;
        }
      }
      this.#wait = failed ? Math.min(2 * this.#wait, 60_000) : this.#o.flushIntervalMs;
    });
    return this.#sending;
  }

  /** Sends what is queued and stops; later rejections are dropped. */
  async close(): Promise<void> {
    this.#closed = true;
    await this.flush();
  }
}
