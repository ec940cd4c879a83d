// Pinning the cluster
//
// Tokens increase per key within one cluster; endpoints that span two
// clusters (a mistake, or a cluster restored from a backup next to an old
// member) would mix two token histories. Every node names its cluster in
// the Fenced-Cluster-Id response header; the client pins the first ID it
// sees (or the clusterId option) and never uses an answer that names
// another: the call fails with a ClusterMismatchError, an UnavailableError,
// so it goes on at the next endpoint as after a connection failure. Each
// such endpoint is reported once (console.error, or the onClusterMismatch
// option). An answer without the header (an older server) is accepted.

import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import { ClusterMismatchError } from "./errors.js";

/** The response header in which a node names its cluster (hex). */
export const CLUSTER_ID_HEADER = "fenced-cluster-id";

export class ClusterPin {
  readonly #reported = new Set<string>();

  constructor(
    public id: string,
    readonly report: (err: ClusterMismatchError) => void,
  ) {}

  /** Pins got unless a cluster is pinned already; throws if got names another. "" or null is accepted. */
  check(endpoint: string, got: string | null | undefined): void {
    if (got && !this.id) {
      this.id = got;
    }
    this.foreign(endpoint, got);
  }

  /** Throws a ClusterMismatchError if got names another cluster than the pinned one; never pins. */
  foreign(endpoint: string, got: string | null | undefined): void {
    if (!got || !this.id || got === this.id) {
      return;
    }
    const err = new ClusterMismatchError(endpoint, this.id, got);
    if (!this.#reported.has(endpoint)) {
      this.#reported.add(endpoint);
      this.report(err);
    }
    throw err;
  }

  /**
   * The interceptor of one endpoint: it checks every answer, errors
   * included, and turns one of another cluster into an unavailable
   * ConnectError whose cause is the ClusterMismatchError.
   */
  interceptor(endpoint: string): Interceptor {
    const check = (h: Headers) => {
      try {
        this.check(endpoint, h.get(CLUSTER_ID_HEADER));
      } catch (err) {
        throw new ConnectError((err as Error).message, Code.Unavailable, undefined, undefined, err);
      }
    };
    return (next) => async (req) => {
      let res;
      try {
        res = await next(req);
      } catch (err) {
        if (err instanceof ConnectError) {
          check(err.metadata);
        }
        throw err;
      }
      check(res.header);
      return res;
    };
  }
}
