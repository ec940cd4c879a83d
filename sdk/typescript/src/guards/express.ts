// Express typing for fencingMiddleware: importing this module (even as
// `import type {} from "@fenced/client/express"`) adds `fencing` to
// Express's Request, and fencingOf(req, guard) gives it with the guard's
// context type (PgGuard: the transaction's client).
//
//   import express from "express";
//   import { fencingMiddleware, fencingOf } from "@fenced/client/express";
//
//   app.post("/invoices/:id", fencingMiddleware(guard), async (req, res) => {
//     const { context: tx, token } = fencingOf(req, guard);
//     await tx.query("UPDATE invoices SET total = $1 WHERE id = $2", [100, req.params.id]);
//     res.end("ok");
//   });
//
// Nothing here imports express: the augmentation names Express's global
// namespace, which @types/express declares.

import type { IncomingMessage } from "node:http";
import { FencedError } from "../errors.js";
import type { Guard } from "./guard.js";
import type { Fencing } from "./http.js";

export { fencingMiddleware } from "./http.js";
export type { Fencing, FencingOptions } from "./http.js";

declare global {
  // eslint-disable-next-line @typescript-eslint/no-namespace
  namespace Express {
    interface Request {
      /**
       * Set by fencingMiddleware on the requests it fences (every method but
       * GET, HEAD, OPTIONS and TRACE), for the handlers after it. fencingOf
       * gives it typed with the guard's context.
       */
      fencing?: Fencing<unknown>;
    }
  }
}

/**
 * req.fencing of a request that fencingMiddleware(guard) let through, with
 * the context typed as guard's (guard is only for the type). Throws when
 * the request was not fenced: a safe method, or no fencingMiddleware before
 * the handler.
 */
export function fencingOf<C>(req: IncomingMessage & { fencing?: Fencing<unknown> }, guard: Guard<C>): Fencing<C> {
  void guard;
  if (!req.fencing) {
    throw new FencedError(`${req.method ?? "?"} ${req.url ?? ""}: not fenced (a safe method, or no fencingMiddleware before this handler)`);
  }
  return req.fencing as Fencing<C>;
}
