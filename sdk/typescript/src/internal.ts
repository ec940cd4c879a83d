// Internals of the client, not part of the API: what it tells a tracer of
// its calls (the torture harness's worker, tests), and the request queue of
// its streams.

/** A lease call as the client is about to send it. */
export interface TraceCall {
  kind: "acquire" | "renew" | "release" | "get";
  key: string;
  owner?: string;
  leaseId?: string;
  ttlMs?: number;
  waitMs?: number;
}

/** What came back: the answer, or the error (the package's, or a transport error). */
export interface TraceResult {
  error?: unknown;
  leaseId?: string;
  owner?: string;
  token?: bigint;
  ttlMs?: number;
  /** get: whether the key is held, and the last token issued. */
  hasLease?: boolean;
  lastToken?: bigint;
}

/**
 * Called just before every attempt of an acquire, renewal, release or get
 * is sent (once per endpoint tried; a renewal on the KeepAlive stream and
 * its unary fallback are two attempts); the function it returns is called
 * with the attempt's result.
 */
export type TraceHook = (call: TraceCall) => (result: TraceResult) => void;

/** Runs fn as a traced call when tracing is on. */
export async function traced<T>(hook: TraceHook | undefined, call: TraceCall, fn: () => Promise<T>, result: (v: T) => TraceResult): Promise<T> {
  const done = hook?.(call);
  if (!done) return fn();
  try {
    const v = await fn();
    done(result(v));
    return v;
  } catch (error) {
    done({ error });
    throw error;
  }
}

/** An async iterable fed by push, ended by end. */
export class Pushable<T> implements AsyncIterable<T> {
  private items: T[] = [];
  private wake?: () => void;
  private ended = false;

  push(v: T): void {
    this.items.push(v);
    this.wake?.();
  }

  end(): void {
    this.ended = true;
    this.wake?.();
  }

  async *[Symbol.asyncIterator](): AsyncIterator<T> {
    for (;;) {
      if (this.items.length > 0) {
        yield this.items.shift()!;
      } else if (this.ended) {
        return;
      } else {
        await new Promise<void>((r) => (this.wake = r));
        this.wake = undefined;
      }
    }
  }
}
