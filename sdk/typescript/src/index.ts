export { Client, tlsFromFiles } from "./client.js";
export type { AcquireOptions, ClientOptions, EventType, StaleRejection, WatchEvent, WatchOptions } from "./client.js";
export { Lease } from "./lease.js";
export type { LeaseInfo } from "./lease.js";
export { parseEndpoints } from "./endpoints.js";
export type { TLSOptions } from "./endpoints.js";
export * from "./errors.js";
export { checkToken, validateScope, toToken, MAX_SCOPE_BYTES, MAX_TOKEN } from "./scope.js";
