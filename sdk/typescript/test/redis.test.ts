import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { Redis } from "ioredis";
import { requireService, redisConfig, unique, goInterop } from "./helpers.js";
import { RedisGuard, Script, key, hashTag, KeyOutsideScopeError } from "../src/guards/redis.js";
import { StaleTokenError, NoTokenError } from "../src/index.js";

let redis: Redis;
const prefix = unique("fence-ts") + ":";
before(() => {
  redis = new Redis({ ...redisConfig, lazyConnect: true, maxRetriesPerRequest: 1 });
});
after(async () => {
  if (redis.status === "ready") {
    const keys = await redis.keys(`*${prefix}*`);
    if (keys.length) await redis.del(...keys);
  }
  redis.disconnect();
});

test("call IDs are 26 characters of the RFC 4648 base32 alphabet, new per call (guard spec, section 3)", async () => {
  const seen: string[] = [];
  const fake = {
    async evalsha(_sha: string, n: number, ...rest: string[]) {
      seen.push(rest.slice(0, n)[1]!);
      return [1, "0", "OK"];
    },
  };
  const g = new RedisGuard(fake as unknown as Redis, { prefix: "fence:" });
  for (let i = 0; i < 50; i++) await g.set("orders/7", 5n, key("orders/7", "order"), "paid");
  for (const k of seen) assert.match(k, /^fence:\{orders\/7\}:call:[A-Z2-7]{26}$/);
  assert.equal(new Set(seen).size, seen.length);
});

test("the Lua script: check, write and record in one step; stale refused with the exact highest", async (t) => {
  if (!(await requireService(t, "Redis", 6379))) return;
  const g = new RedisGuard(redis, { prefix });
  const scope = unique("orders/7");
  const k = key(scope, "order");
  await g.set(scope, 5n, k, "paid");
  assert.equal(await redis.get(k), "paid");
  assert.equal(await g.highest(scope), 5n);
  await assert.rejects(g.set(scope, 4n, k, "late"), (e: unknown) => e instanceof StaleTokenError && e.highest === 5n && e.presented === 4n);
  assert.equal(await redis.get(k), "paid");
  assert.equal(await g.incrBy(scope, 5n, key(scope, "n"), 3), 3);
  // Tokens above 2^53 compare exactly.
  const big = (1n << 64n) - 2n;
  await g.set(scope, big, k, "big");
  await assert.rejects(g.set(scope, big - 1n, k, "x"), (e: unknown) => e instanceof StaleTokenError && e.highest === big);
  await assert.rejects(g.set(scope, 0n, k, "x"), NoTokenError);
  await assert.rejects(g.set(scope, big, "elsewhere", "x"), KeyOutsideScopeError);
  await assert.rejects(g.set(scope, big, g.tokenKey(scope), "1"), KeyOutsideScopeError);
  // A body that refuses records nothing.
  const refuse = new Script("return redis.error_reply('no')");
  const s2 = unique("refuse");
  await assert.rejects(g.eval(s2, 3n, refuse, [key(s2, "x")]), /no/);
  assert.equal(await g.highest(s2), 0n);
  assert.equal(hashTag("a{b}%"), "a%7Bb%7D%25");
});

test("interop: the Go guard (fenceredis) and this one share keys and script", async (t) => {
  if (!(await requireService(t, "Redis", 6379))) return;
  const g = new RedisGuard(redis, { prefix });
  const scope = unique("shared{x}");
  const k = key(scope, "v");
  await g.set(scope, 10n, k, "ts");
  assert.deepEqual(goInterop("redis", "127.0.0.1:6379", prefix, scope, 9, k, "go-late"), { stale: true, highest: "10" });
  assert.equal(await redis.get(k), "ts");
  assert.deepEqual(goInterop("redis", "127.0.0.1:6379", prefix, scope, 12, k, "go"), { accepted: true });
  assert.equal(await redis.get(k), "go");
  await assert.rejects(g.set(scope, 11n, k, "ts-late"), (e: unknown) => e instanceof StaleTokenError && e.highest === 12n);
  assert.equal(await redis.get(k), "go");
});
