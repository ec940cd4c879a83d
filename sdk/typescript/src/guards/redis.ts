// The Redis guard over ioredis, running the Go guard's (fenceredis) Lua
// script byte for byte, with the same keys and calling convention, so that a
// Go and a TypeScript writer of one scope see each other's tokens.
//
// The highest token of scope S lives at prefix + "{" + hashTag(S) +
// "}:highest" (default "fence:{S}:highest"). Every key a mutation touches
// must carry the same hash tag, so that on Redis Cluster the script runs on
// one node; key(S, name) builds such keys. Check, mutation and record are
// one script, which Redis runs without interleaving any other command.
//
// Each call carries a random call ID (26 characters of the RFC 4648 base32
// alphabet, A-Z and 2-7, as Go's crypto/rand.Text and the Python guard
// make them); the script stores its reply under
// prefix + "{" + tag + "}:call:" + ID for the replay window, so a copy of
// the call that ioredis re-sends after a reconnect gets the first reply back
// instead of applying twice.
//
// Non-guarantees: durability and replication are Redis's (an acknowledged
// write can be lost in a crash or failover, token and data together); with
// an allkeys-* eviction policy a token key may be evicted; a call that fails
// with a network error has an unknown outcome.

import { createHash, randomBytes } from "node:crypto";
import type { Cluster, Redis } from "ioredis";
import { DuplicateError, FencedError, SequenceGapError, StaleTokenError } from "../errors.js";
import { checkSequence, checkToken } from "../scope.js";
import { type Decision, type FenceLease, type Observer, reportStale, type WriteOptions } from "./guard.js";

/** Thrown when a mutation's key does not carry the scope's hash tag, or is the token key. Nothing is sent. */
export class KeyOutsideScopeError extends FencedError {}

const bodyHead = "local function __fence_body(KEYS, ARGV, TOKEN)\n";
const bodyTail = `
end

local function __fence_less(a, b)
	if #a ~= #b then return #a < #b end
	for i = 1, #a do
		local x, y = string.byte(a, i), string.byte(b, i)
		if x ~= y then return x < y end
	end
	return false
end

local done = redis.call('GET', KEYS[2])
if done then
	return cmsgpack.unpack(done)
end

local token = ARGV[1]
local highest = redis.call('GET', KEYS[1])
if highest then
	if not string.find(highest, '^[1-9]%d*$') or __fence_less('18446744073709551615', highest) then
		return redis.error_reply('fenceredis: highest-token key ' .. KEYS[1] .. ' holds ' ..
			string.format('%q', string.sub(highest, 1, 40)) .. ', not a token')
	end
	if __fence_less(token, highest) then
		local reply = {0, highest}
		redis.call('SET', KEYS[2], cmsgpack.pack(reply), 'PX', ARGV[3])
		return reply
	end
end

local keys, argv = {}, {}
for i = 3, #KEYS do keys[i - 2] = KEYS[i] end
for i = 4, #ARGV do argv[i - 3] = ARGV[i] end
local result = __fence_body(keys, argv, token)
if type(result) == 'table' and result.err then
	return result
end

if ARGV[2] ~= '0' then
	redis.call('SET', KEYS[1], token, 'PX', ARGV[2])
elseif token ~= highest then
	redis.call('SET', KEYS[1], token)
end
local reply = {1, highest or '0', result}
redis.call('SET', KEYS[2], cmsgpack.pack(reply), 'PX', ARGV[3])
return reply
`;

// For writes with a sequence (guard spec, section 7): fenceredis's seqTail
// byte for byte. KEYS[3] is the sequence key ("<token>:<sequence>"), the
// mutation's keys start at KEYS[4]; ARGV[4] is the sequence, ARGV[5] "1" for
// strict, the mutation's arguments start at ARGV[6]; replies {2, last}
// (duplicate) and {3, last} (gap) are added.
const seqTail = `
end

local function __fence_less(a, b)
	if #a ~= #b then return #a < #b end
	for i = 1, #a do
		local x, y = string.byte(a, i), string.byte(b, i)
		if x ~= y then return x < y end
	end
	return false
end

local function __fence_succ(a)
	local i = #a
	while i > 0 and string.byte(a, i) == 57 do i = i - 1 end
	if i == 0 then return '1' .. string.rep('0', #a) end
	return string.sub(a, 1, i - 1) .. string.char(string.byte(a, i) + 1) .. string.rep('0', #a - i)
end

local done = redis.call('GET', KEYS[2])
if done then
	return cmsgpack.unpack(done)
end

local token = ARGV[1]
local highest = redis.call('GET', KEYS[1])
if highest then
	if not string.find(highest, '^[1-9]%d*$') or __fence_less('18446744073709551615', highest) then
		return redis.error_reply('fenceredis: highest-token key ' .. KEYS[1] .. ' holds ' ..
			string.format('%q', string.sub(highest, 1, 40)) .. ', not a token')
	end
	if __fence_less(token, highest) then
		local reply = {0, highest}
		redis.call('SET', KEYS[2], cmsgpack.pack(reply), 'PX', ARGV[3])
		return reply
	end
end

local seq = ARGV[4]
if token == highest then
	local last = '0'
	local stored = redis.call('GET', KEYS[3])
	if stored then
		local t, q = string.match(stored, '^([1-9]%d*):([1-9]%d*)$')
		if not t then
			return redis.error_reply('fenceredis: sequence key ' .. KEYS[3] .. ' holds ' ..
				string.format('%q', string.sub(stored, 1, 60)) .. ', not a token and a sequence')
		end
		if t == highest then last = q end
	end
	local reply
	if not __fence_less(last, seq) then
		reply = {2, last}
	elseif ARGV[5] == '1' and seq ~= __fence_succ(last) then
		reply = {3, last}
	end
	if reply then
		redis.call('SET', KEYS[2], cmsgpack.pack(reply), 'PX', ARGV[3])
		return reply
	end
end

local keys, argv = {}, {}
for i = 4, #KEYS do keys[i - 3] = KEYS[i] end
for i = 6, #ARGV do argv[i - 5] = ARGV[i] end
local result = __fence_body(keys, argv, token)
if type(result) == 'table' and result.err then
	return result
end

if ARGV[2] ~= '0' then
	redis.call('SET', KEYS[1], token, 'PX', ARGV[2])
	redis.call('SET', KEYS[3], token .. ':' .. seq, 'PX', ARGV[2])
else
	if token ~= highest then
		redis.call('SET', KEYS[1], token)
	end
	redis.call('SET', KEYS[3], token .. ':' .. seq)
end
local reply = {1, highest or '0', result}
redis.call('SET', KEYS[2], cmsgpack.pack(reply), 'PX', ARGV[3])
return reply
`;

/**
 * A Lua body run after the token check, inside the guard's script: KEYS and
 * ARGV are the mutation's own, TOKEN the presented token as decimal digits
 * (do not tonumber it). It runs only if the token is not stale; the token is
 * recorded after it returns. Return redis.error_reply(msg) before writing
 * anything to abort without recording the token.
 */
export class Script {
  readonly text: string;
  readonly sha: string;
  /** The script for writes with a sequence. */
  readonly seqText: string;
  readonly seqSha: string;

  constructor(readonly body: string) {
    this.text = bodyHead + body + bodyTail;
    this.sha = createHash("sha1").update(this.text).digest("hex");
    this.seqText = bodyHead + body + seqTail;
    this.seqSha = createHash("sha1").update(this.seqText).digest("hex");
  }
}

const setScript = new Script(`
local mode = ARGV[2]
if mode == '' then
	return redis.call('SET', KEYS[1], ARGV[1])
elseif mode == 'keep' then
	return redis.call('SET', KEYS[1], ARGV[1], 'KEEPTTL')
end
return redis.call('SET', KEYS[1], ARGV[1], 'PX', mode)
`);

const delScript = new Script(`
local n = 0
for i = 1, #KEYS do
	n = n + redis.call('DEL', KEYS[i])
end
return n
`);

const hsetScript = new Script(`
local n = 0
for i = 1, #ARGV, 2 do
	n = n + redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
end
return n
`);

const incrByScript = new Script(`
return redis.call('INCRBY', KEYS[1], ARGV[1])
`);

const base32 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

/** @internal A new call ID: 26 random characters of the RFC 4648 base32 alphabet (guard spec, section 3). */
export function callID(): string {
  const b = randomBytes(26);
  let s = "";
  for (const x of b) s += base32[x & 31];
  return s;
}

/** The text between '{' and '}' in every key of scope: the scope with '%', '{' and '}' percent-encoded. */
export function hashTag(scope: string): string {
  return /[%{}]/.test(scope) ? scope.replace(/[%{}]/g, (c) => ({ "%": "%25", "{": "%7B", "}": "%7D" })[c]!) : scope;
}

/** name + "{" + hashTag(scope) + "}": a key that the guard accepts in mutations of scope. */
export function key(scope: string, name: string): string {
  return `${name}{${hashTag(scope)}}`;
}

function tagOf(k: string): string | undefined {
  const open = k.indexOf("{");
  if (open < 0) return undefined;
  const close = k.indexOf("}", open + 1);
  return close > open + 1 ? k.slice(open + 1, close) : undefined;
}

export interface RedisGuardOptions {
  /** Prefix of the guard's own keys. Default "fence:"; no braces. */
  prefix?: string;
  /** Milliseconds to keep a scope's highest token; 0 (default) keeps it for ever. */
  tokenTTLMs?: number;
  /** How long a call's reply is remembered for copies of it. Default 60000 ms. */
  replayWindowMs?: number;
  /** Told of every decision. */
  observer?: Observer;
  /** Refuse a sequence other than last+1 under the same token (SequenceGapError). */
  strictSequences?: boolean;
}

/** Enforces fencing tokens on data kept in Redis. Safe for concurrent use. */
export class RedisGuard {
  readonly prefix: string;
  readonly #ttlArg: string;
  readonly #replayArg: string;
  readonly #observer?: Observer;
  readonly #strict: string;

  constructor(
    private readonly redis: Redis | Cluster,
    options: RedisGuardOptions = {},
  ) {
    this.prefix = options.prefix ?? "fence:";
    if (/[{}]/.test(this.prefix)) {
      throw new TypeError(`fenceredis: prefix ${JSON.stringify(this.prefix)} must not contain '{' or '}'`);
    }
    const ttl = options.tokenTTLMs ?? 0;
    const replay = options.replayWindowMs ?? 60_000;
    if (!Number.isInteger(ttl) || ttl < 0) throw new TypeError(`fenceredis: token TTL ${ttl} must be a non-negative integer`);
    if (!Number.isInteger(replay) || replay < 2) throw new TypeError(`fenceredis: replay window ${replay} is below 2ms`);
    this.#ttlArg = String(ttl);
    this.#replayArg = String(replay);
    this.#observer = options.observer;
    this.#strict = options.strictSequences ? "1" : "0";
  }

  /** The key holding scope's last sequence and the token it was accepted under, "<token>:<sequence>". */
  sequenceKey(scope: string): string {
    return `${this.prefix}{${hashTag(scope)}}:sequence`;
  }

  /** The key holding scope's highest token. */
  tokenKey(scope: string): string {
    return `${this.prefix}{${hashTag(scope)}}:highest`;
  }

  /** SET key value, with px milliseconds of expiry or "keep" for KEEPTTL. */
  async set(scope: string, token: bigint, k: string, value: string | number, options: { px?: number | "keep" } & WriteOptions = {}): Promise<void> {
    const mode = options.px === undefined ? "" : options.px === "keep" ? "keep" : String(options.px);
    await this.#run("set", scope, token, setScript, [k], [String(value), mode], options);
  }

  /** DEL keys; returns how many existed. */
  async del(scope: string, token: bigint, ...keys: string[]): Promise<number> {
    if (keys.length === 0) throw new TypeError("fenceredis: del: no keys");
    return Number(await this.#run("del", scope, token, delScript, keys, []));
  }

  /** HSET key field value ...; returns how many fields were added. */
  async hset(scope: string, token: bigint, k: string, fields: Record<string, string | number>): Promise<number> {
    const args = Object.entries(fields).flatMap(([f, v]) => [f, String(v)]);
    if (args.length === 0) throw new TypeError("fenceredis: hset: no fields");
    return Number(await this.#run("hset", scope, token, hsetScript, [k], args));
  }

  /** INCRBY key delta; returns the new value. */
  async incrBy(scope: string, token: bigint, k: string, delta: number): Promise<number> {
    return Number(await this.#run("incrby", scope, token, incrByScript, [k], [String(delta)]));
  }

  /** Runs script's body after the token check, in the same script; returns the body's result. */
  async eval(scope: string, token: bigint, script: Script, keys: string[], args: (string | number)[] = [], options: WriteOptions = {}): Promise<unknown> {
    return this.#run("eval", scope, token, script, keys, args.map(String), options);
  }

  /** The highest token accepted for scope, 0 if none. */
  async highest(scope: string): Promise<bigint> {
    checkToken(scope, 1n, 0n);
    const v = await this.redis.get(this.tokenKey(scope));
    if (v === null) return 0n;
    if (!/^[1-9][0-9]*$/.test(v)) throw new Error(`fenceredis: highest token ${JSON.stringify(v)} is not a token written by a guard`);
    return BigInt(v);
  }

  /** The mutations bound to a lease's key and token; a stale rejection marks the lease lost. */
  withLease(lease: FenceLease): LeaseRedisGuard {
    return new LeaseRedisGuard(this, lease);
  }

  async #run(op: string, scope: string, token: bigint, s: Script, keys: string[], args: string[], options: WriteOptions = {}): Promise<unknown> {
    const seq = options.sequence ?? 0n;
    checkSequence(scope, token, seq, 0n, 0n);
    const tag = hashTag(scope);
    const tk = this.tokenKey(scope);
    const sk = this.sequenceKey(scope);
    for (const k of keys) {
      if (k === tk) throw new KeyOutsideScopeError(`fenceredis: ${op}: key ${JSON.stringify(k)} is the highest-token key of scope ${JSON.stringify(scope)}`);
      if (k === sk) throw new KeyOutsideScopeError(`fenceredis: ${op}: key ${JSON.stringify(k)} is the sequence key of scope ${JSON.stringify(scope)}`);
      const got = tagOf(k);
      if (got !== tag) {
        throw new KeyOutsideScopeError(
          `fenceredis: ${op}: key ${JSON.stringify(k)} has ${got === undefined ? "no hash tag" : `hash tag {${got}}`}, want {${tag}} for scope ${JSON.stringify(scope)} (build keys with key())`,
        );
      }
    }
    const call = `${this.prefix}{${tag}}:call:${callID()}`;
    const sequenced = seq !== 0n;
    const allKeys = sequenced ? [tk, call, sk, ...keys] : [tk, call, ...keys];
    const allArgs = sequenced
      ? [token.toString(), this.#ttlArg, this.#replayArg, seq.toString(), this.#strict, ...args]
      : [token.toString(), this.#ttlArg, this.#replayArg, ...args];
    const [sha, text] = sequenced ? [s.seqSha, s.seqText] : [s.sha, s.text];
    let reply: unknown;
    try {
      reply = await this.redis.evalsha(sha, allKeys.length, ...allKeys, ...allArgs);
    } catch (err) {
      if (!(err instanceof Error) || !err.message.startsWith("NOSCRIPT")) throw err;
      reply = await this.redis.eval(text, allKeys.length, ...allKeys, ...allArgs);
    }
    if (!Array.isArray(reply) || reply.length < 2 || ![0, 1, 2, 3].includes(reply[0]) || typeof reply[1] !== "string") {
      throw new Error(`fenceredis: ${op} scope ${JSON.stringify(scope)} token ${token}: malformed script reply ${JSON.stringify(reply)}`);
    }
    const n = BigInt(reply[1]); // the highest token; the last sequence for 2 and 3
    const d: Decision = { scope, presented: token, highest: reply[0] >= 2 ? token : n, accepted: reply[0] === 1, owner: options.owner };
    if (sequenced) d.sequence = seq;
    switch (reply[0]) {
      case 0:
        this.#observer?.observe(d);
        throw new StaleTokenError(scope, token, n);
      case 2:
        this.#observer?.observe({ ...d, duplicate: true });
        throw new DuplicateError(scope, token, seq, n);
      case 3:
        throw new SequenceGapError(scope, token, seq, n);
    }
    this.#observer?.observe(d);
    return reply[2];
  }
}

/** A RedisGuard bound to a lease: the lease's key is the scope and its token the token. */
export class LeaseRedisGuard {
  constructor(
    readonly guard: RedisGuard,
    readonly lease: FenceLease,
  ) {}

  /** A key of the lease's scope. */
  key(name: string): string {
    return key(this.lease.key, name);
  }

  async #bound<T>(fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (err) {
      throw reportStale(this.lease, err);
    }
  }

  set(k: string, value: string | number, options: { px?: number | "keep" } = {}): Promise<void> {
    return this.#bound(() => this.guard.set(this.lease.key, this.lease.token, k, value, { ...options, owner: this.lease.owner }));
  }

  del(...keys: string[]): Promise<number> {
    return this.#bound(() => this.guard.del(this.lease.key, this.lease.token, ...keys));
  }

  hset(k: string, fields: Record<string, string | number>): Promise<number> {
    return this.#bound(() => this.guard.hset(this.lease.key, this.lease.token, k, fields));
  }

  incrBy(k: string, delta: number): Promise<number> {
    return this.#bound(() => this.guard.incrBy(this.lease.key, this.lease.token, k, delta));
  }

  eval(script: Script, keys: string[], args: (string | number)[] = []): Promise<unknown> {
    return this.#bound(() => this.guard.eval(this.lease.key, this.lease.token, script, keys, args));
  }
}
