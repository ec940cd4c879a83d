// The one place where Connect errors become the package's errors, and where
// transport failures are told apart from answers.

import { Code, ConnectError } from "@connectrpc/connect";
import { codeToString } from "@connectrpc/connect/protocol-connect";
import { LeaseHeldSchema } from "./gen/fenced/v1/lease_pb.js";
import {
  AbortedError,
  ClusterMismatchError,
  FencedError,
  HeldError,
  InvalidArgumentError,
  NotHeldError,
  PermissionDeniedError,
  RPCError,
  TimeoutError,
  UnauthenticatedError,
  UnavailableError,
} from "./errors.js";

function errorChain(err: unknown): unknown[] {
  const chain: unknown[] = [];
  while (err instanceof Error && !chain.includes(err)) {
    chain.push(err);
    err = (err as { cause?: unknown }).cause;
  }
  return chain;
}

function systemCodes(err: unknown): string[] {
  return errorChain(err).flatMap((e) => {
    const c = (e as { code?: unknown }).code;
    return typeof c === "string" ? [c] : [];
  });
}

/**
 * Reports whether err says the call did not reach a node able to serve it:
 * the answer unavailable, or a transport failure (refused, reset, broken
 * HTTP/2 session, TLS handshake), which connect-node reports with other
 * codes.
 */
export function retryable(err: unknown): boolean {
  if (err instanceof UnavailableError) {
    return true;
  }
  if (!(err instanceof ConnectError)) {
    return false;
  }
  if (err.code === Code.Unavailable) {
    return true;
  }
  if (err.code !== Code.Aborted && err.code !== Code.Internal && err.code !== Code.Unknown) {
    return false;
  }
  return systemCodes(err).some((c) => /^E[A-Z]+$|^ERR_HTTP2_|^ERR_SSL_|^ERR_TLS_|CERT|^ERR_STREAM_/.test(c)) ||
    errorChain(err).some((e) => e instanceof Error && /socket hang up/.test(e.message));
}

/**
 * Reports whether a failed attempt may have reached a server of the pinned
 * cluster that acted on it: only a refused connection proves it did not, or
 * an answer of another cluster, whose grant is of no concern to the pinned
 * cluster's keys (pin.ts).
 */
export function mayHaveArrived(err: unknown): boolean {
  return !systemCodes(err).includes("ECONNREFUSED") && !errorChain(err).some((e) => e instanceof ClusterMismatchError);
}

/** Turns an error of a call into the package's errors; what is not a Connect error is returned as is. */
export function fromRPC(err: unknown, what: string): unknown {
  const mismatch = errorChain(err).find((e) => e instanceof ClusterMismatchError);
  if (mismatch) {
    return mismatch;
  }
  if (err instanceof FencedError || !(err instanceof ConnectError)) {
    return err;
  }
  const msg = `${what}: ${err.message}`;
  const opts = { cause: err };
  switch (err.code) {
    case Code.FailedPrecondition: {
      const [h] = err.findDetails(LeaseHeldSchema);
      if (h) {
        return new HeldError(h.key, h.owner, h.token, Number(h.remainingMs), opts);
      }
      break;
    }
    case Code.NotFound:
      return new NotHeldError(`${msg} (not the current lease)`, opts);
    case Code.InvalidArgument:
      return new InvalidArgumentError(msg, opts);
    case Code.Unauthenticated:
      return new UnauthenticatedError(msg, opts);
    case Code.PermissionDenied:
      return new PermissionDeniedError(msg, opts);
    case Code.DeadlineExceeded:
      return new TimeoutError(msg, opts);
    case Code.Canceled:
      return new AbortedError(msg, opts);
  }
  if (retryable(err)) {
    return new UnavailableError(msg, opts);
  }
  return new RPCError(msg, codeToString(err.code), opts);
}
