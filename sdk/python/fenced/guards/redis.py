"""Redis guard: Go fenceredis's Lua script and keys (docs/guard-spec.md, section 3).

    guard = RedisGuard(redis.Redis())
    guard.set(lease.key, lease.token, RedisGuard.key(lease.key, "report"), "v1")

Every mutation is one script that checks the token against the scope's
highest-token key, runs the mutation and records the token, atomically. The
script text is byte for byte fenceredis's, so Go and Python guards on one
Redis share every scope's highest token. Each call gets a fresh outcome
key, and redis-py re-sends a call whose reply was lost with the same keys,
so a re-sent call returns the first one's reply instead of running twice.

Tokens are compared as decimal strings: the whole uint64 range works.
"""

from __future__ import annotations

import base64
import os
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from .. import _scope
from ..sign import Verifier, verify
from ..errors import (CorruptToken, Duplicate, FencedError, InvalidArgument, InvalidSequence, KeyOutsideScope,
                      SequenceGap, StaleToken)
from . import Decision, lease_owner, lost

DEFAULT_PREFIX = "fence:"
DEFAULT_REPLAY_WINDOW = 60.0

HEAD = "local function __fence_body(KEYS, ARGV, TOKEN)\n"
TAIL = """
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
"""

# TAIL_SEQ replaces TAIL for a write with a sequence (docs/guard-spec.md,
# section 7): KEYS[3] is the sequence key, the mutation's keys start at
# KEYS[4]; ARGV[4] is the sequence, ARGV[5] "1" for a strict guard, the
# mutation's arguments start at ARGV[6]; {2, last} is a duplicate and
# {3, last} a gap. Go's seqTail, byte for byte.
TAIL_SEQ = """
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
"""

SET_BODY = """
local mode = ARGV[2]
if mode == '' then
	return redis.call('SET', KEYS[1], ARGV[1])
elseif mode == 'keep' then
	return redis.call('SET', KEYS[1], ARGV[1], 'KEEPTTL')
end
return redis.call('SET', KEYS[1], ARGV[1], 'PX', mode)
"""

DEL_BODY = """
local n = 0
for i = 1, #KEYS do
	n = n + redis.call('DEL', KEYS[i])
end
return n
"""

HSET_BODY = """
local n = 0
for i = 1, #ARGV, 2 do
	n = n + redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
end
return n
"""


def wrap(body: str, sequenced: bool = False) -> str:
    """The full script for a mutation body: HEAD + body + TAIL (TAIL_SEQ with a sequence)."""
    return HEAD + body + (TAIL_SEQ if sequenced else TAIL)


def hash_tag(scope: str) -> str:
    if not any(c in scope for c in "%{}"):
        return scope
    return "".join({"%": "%25", "{": "%7B", "}": "%7D"}.get(c, c) for c in scope)


def _tag_of(key: str) -> Optional[str]:
    open_ = key.find("{")
    if open_ < 0:
        return None
    close = key.find("}", open_ + 1)
    if close <= open_ + 1:
        return None
    return key[open_ + 1:close]


def _s(v: object) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


class RedisGuard:
    """Go's fenceredis.Guard for redis-py clients. Thread-safe as the client is."""

    def __init__(self, client: Any, prefix: str = DEFAULT_PREFIX, token_ttl: float = 0,
                 replay_window: float = DEFAULT_REPLAY_WINDOW, observer: Optional[Callable[[Decision], None]] = None,
                 verifier: Optional[Verifier] = None, strict_sequences: bool = False) -> None:
        if client is None:
            raise InvalidArgument("fenceredis: nil client")
        if "{" in prefix or "}" in prefix:
            raise InvalidArgument(f"fenceredis: prefix {prefix!r} must not contain '{{' or '}}'")
        if token_ttl < 0 or 0 < token_ttl < 0.001:
            raise InvalidArgument(f"fenceredis: token TTL {token_ttl}s is negative or below 1ms")
        if replay_window < 0.002:
            raise InvalidArgument(f"fenceredis: replay window {replay_window}s is below 2ms")
        self.client, self.prefix, self.observer, self.verifier = client, prefix, observer, verifier
        self.strict_arg = "1" if strict_sequences else "0"
        self.ttl_arg = str(int(token_ttl * 1000))
        self.replay_arg = str(int(replay_window * 1000))
        self._scripts: Dict[Tuple[str, bool], Any] = {}

    @staticmethod
    def key(scope: str, name: str) -> str:
        """name + "{" + hash_tag(scope) + "}": a data key in scope's slot."""
        return name + "{" + hash_tag(scope) + "}"

    def token_key(self, scope: str) -> str:
        return self.prefix + "{" + hash_tag(scope) + "}:highest"

    def sequence_key(self, scope: str) -> str:
        """Where scope's last sequence lives, "<token>:<sequence>"; only the guard writes it."""
        return self.prefix + "{" + hash_tag(scope) + "}:sequence"

    def _outcome_key(self, scope: str) -> str:
        rid = base64.b32encode(os.urandom(17)).decode()[:26]
        return self.prefix + "{" + hash_tag(scope) + "}:call:" + rid

    def script(self, body: str, sequenced: bool = False) -> Any:
        """Register a user body (see docs/guard-spec.md for what it may use)."""
        s = self._scripts.get((body, sequenced))
        if s is None:
            s = self._scripts[(body, sequenced)] = self.client.register_script(wrap(body, sequenced))
        return s

    def set(self, scope: str, token: int, key: str, value: Any, ttl: Union[None, str, float] = None, owner: str = "", signature: str = "", sequence: int = 0) -> Any:
        """SET key value, fenced. ttl: None (no expiry), "keep" (KEEPTTL) or seconds (>= 1ms)."""
        if ttl is None:
            mode = ""
        elif ttl == "keep":
            mode = "keep"
        elif isinstance(ttl, (int, float)) and ttl >= 0.001:
            mode = str(int(ttl * 1000))
        else:
            raise InvalidArgument(f"fenceredis: set {key!r}: ttl {ttl!r} is neither None, 'keep' nor at least 1ms")
        return self._run(scope, token, SET_BODY, [key], [value, mode], owner, signature, sequence)

    def delete(self, scope: str, token: int, *keys: str, owner: str = "", signature: str = "", sequence: int = 0) -> int:
        if not keys:
            raise InvalidArgument("fenceredis: del: no keys")
        return int(self._run(scope, token, DEL_BODY, list(keys), [], owner, signature, sequence))

    def hset(self, scope: str, token: int, key: str, mapping: Mapping[Any, Any], owner: str = "", signature: str = "", sequence: int = 0) -> int:
        if not mapping:
            raise InvalidArgument(f"fenceredis: hset {key!r}: no fields")
        args = [x for kv in mapping.items() for x in kv]
        return int(self._run(scope, token, HSET_BODY, [key], args, owner, signature, sequence))

    def eval(self, scope: str, token: int, body: str, keys: Sequence[str], args: Sequence[Any] = (), owner: str = "", signature: str = "", sequence: int = 0) -> Any:
        return self._run(scope, token, body, list(keys), list(args), owner, signature, sequence)

    def highest(self, scope: str) -> int:
        _scope.validate_scope(scope)
        v = self.client.get(self.token_key(scope))
        if v is None:
            return 0
        return _parse_token(_s(v), self.token_key(scope))

    def _run(self, scope: str, token: int, body: str, keys: List[str], args: List[Any], owner: str,
             signature: str = "", sequence: int = 0) -> Any:
        _scope.check(scope, token, 0)
        if token > _scope.MAX_TOKEN:
            raise InvalidArgument(f"fencing token {token} exceeds the uint64 range")
        if sequence < 0 or sequence > 2**63 - 1:
            raise InvalidSequence(f"invalid fencing sequence: {sequence} is outside 1..{2**63 - 1}")
        verify(self.verifier, scope, token, signature)
        tk, sk, tag = self.token_key(scope), self.sequence_key(scope), hash_tag(scope)
        for k in keys:
            if k in (tk, sk):
                raise KeyOutsideScope(f"key {k!r} is a key of the guard's own for scope {scope!r}")
            got = _tag_of(k)
            if got != tag:
                raise KeyOutsideScope(f"key {k!r} has hash tag {{{got}}}, want {{{tag}}} for scope {scope!r}"
                                      " (build keys with RedisGuard.key)")
        all_keys = [tk, self._outcome_key(scope)]
        all_args = [str(token), self.ttl_arg, self.replay_arg]
        if sequence:
            all_keys.append(sk)
            all_args += [str(sequence), self.strict_arg]
        reply = self.script(body, bool(sequence))(keys=all_keys + keys, args=all_args + args)
        if not isinstance(reply, list) or len(reply) < 2 or reply[0] not in (0, 1, 2, 3):
            raise FencedError(f"fenceredis: scope {scope!r} token {token}: malformed script reply {reply!r}")
        flag, h = reply[0], _s(reply[1])
        n = 0 if h == "0" else _parse_token(h, tk)  # the highest token, or the last sequence (2, 3)
        if flag == 2:
            if self.observer is not None:
                self.observer(Decision(scope, token, token, False, owner, duplicate=True))
            raise Duplicate(scope, token, sequence, n)
        if flag == 3:
            raise SequenceGap(scope, token, sequence, n)
        if self.observer is not None:
            self.observer(Decision(scope, token, n, flag == 1, owner))
        if flag == 0:
            raise StaleToken(scope, token, n)
        return reply[2] if len(reply) > 2 else None

    def lease(self, lease: Any) -> "LeaseRedis":
        """The same calls with the lease's key and token; a stale rejection loses the lease."""
        return LeaseRedis(self, lease)


class LeaseRedis:
    def __init__(self, guard: RedisGuard, lease: Any) -> None:
        self.g, self.l = guard, lease

    def _do(self, fn: Callable[..., Any], *a: Any, **kw: Any) -> Any:
        try:
            return fn(self.l.key, self.l.token, *a, owner=lease_owner(self.l),
                      signature=getattr(self.l, "signature", ""), **kw)
        except StaleToken as e:
            lost(self.l, e)
            raise

    def set(self, key: str, value: Any, ttl: Union[None, str, float] = None, sequence: int = 0) -> Any:
        return self._do(self.g.set, key, value, ttl, sequence=sequence)

    def delete(self, *keys: str) -> int:
        return int(self._do(self.g.delete, *keys))

    def hset(self, key: str, mapping: Mapping[Any, Any]) -> int:
        return int(self._do(self.g.hset, key, mapping))

    def eval(self, body: str, keys: Sequence[str], args: Sequence[Any] = ()) -> Any:
        return self._do(self.g.eval, body, keys, args)


def _parse_token(s: str, key: str) -> int:
    if not s.isdigit() or s.startswith("0") or int(s) > _scope.MAX_TOKEN or str(int(s)) != s:
        raise CorruptToken(f"fenceredis: highest-token key {key} holds {s[:40]!r}, not a token written by a guard")
    return int(s)
