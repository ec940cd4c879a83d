package fenceredis

import (
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/fencedio/fenced/internal/failpoint"
)

// Script is a Lua body that Guard.Eval runs after the token check, inside the
// same Redis script. Create it once with NewScript and reuse it: the full
// script text and its SHA-1 are computed once, and Redis caches it by that
// SHA-1.
//
// Inside the body:
//
//   - KEYS[1..n] are the keys passed to Eval, in order. The highest-token key
//     is not among them.
//   - ARGV[1..m] are the args passed to Eval, in order.
//   - TOKEN is the presented token as a string of decimal digits. Do not
//     convert it with tonumber: Lua numbers are doubles and lose precision
//     above 2^53.
//   - The body's return value becomes Eval's result (converted to a Redis
//     reply as for any script: a Lua table with holes is cut at the first
//     nil, false becomes nil).
//
// The body runs only if the token is not stale. The token is recorded after
// the body returns, so:
//
//   - To abort without recording the token, return redis.error_reply(msg)
//     before writing anything; Eval returns msg as an error.
//   - A runtime error raised by redis.call (a wrong type, for instance) ends
//     the script: the token is not recorded, but Redis does NOT undo the
//     writes the body made before the error. Check what can fail before the
//     first write, or use redis.pcall.
//
// The body is wrapped in a Lua function, so a top-level return works as in a
// plain script, line numbers in Redis error messages are offset by the
// wrapper's lines, and the body cannot see the wrapper's locals. It must
// touch only the keys it is given (Redis Cluster requires that; the guard
// checks the key names, not what the body does with them). The body is
// trusted code: it runs with the same rights as the guard.
type Script struct {
	body  string
	rs    *redis.Script
	seqRS *redis.Script // for writes with a sequence (fence.WithSequence)
}

// NewScript wraps body in the guard's check-and-record script. See Script
// for what body can use.
func NewScript(body string) *Script {
	return &Script{body: body, rs: redis.NewScript(wrapBody(body, bodyTail)), seqRS: redis.NewScript(wrapBody(body, seqTailFor()))}
}

// Body returns the Lua body given to NewScript.
func (s *Script) Body() string { return s.body }

// The script's calling convention, shared by every mutation:
//
//	KEYS[1]   the scope's highest-token key
//	KEYS[2]   the call's outcome key (see Config.ReplayWindow)
//	KEYS[3..] the mutation's keys, seen by the body as KEYS[1..]
//	ARGV[1]   the presented token, decimal digits without leading zeros
//	ARGV[2]   milliseconds to keep the highest-token key, "0" for ever
//	ARGV[3]   milliseconds to keep the outcome key
//	ARGV[4..] the mutation's arguments, seen by the body as ARGV[1..]
//
// Reply: {0, highest} when the token is stale; {1, highest before, result}
// when it was accepted and recorded; an error reply otherwise. The reply of a
// decided call is also stored, MessagePack-encoded, at the outcome key, and a
// call whose outcome key exists returns the stored reply without checking or
// applying anything: that call is a copy of one that already ran (go-redis
// re-sends a command whose reply it lost). An error reply is not stored,
// because nothing was decided; a copy of such a call runs again.
//
// Tokens are compared as strings (by length, then digit by digit), never as
// Lua numbers, so all 64 bits count. The comparison goes byte by byte rather
// than with '<', because Lua's string '<' follows the server's collation
// locale.
const (
	bodyHead = "local function __fence_body(KEYS, ARGV, TOKEN)\n"
	bodyTail = `
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
`
)

// seqTail replaces bodyTail for a write with a sequence (docs/guard-spec.md,
// section 7). Its calling convention:
//
//	KEYS[1]   the scope's highest-token key
//	KEYS[2]   the call's outcome key
//	KEYS[3]   the scope's sequence key, "<token>:<last sequence>"
//	KEYS[4..] the mutation's keys, seen by the body as KEYS[1..]
//	ARGV[1]   the presented token
//	ARGV[2]   milliseconds to keep the highest-token and sequence keys, "0" for ever
//	ARGV[3]   milliseconds to keep the outcome key
//	ARGV[4]   the sequence, decimal digits without leading zeros
//	ARGV[5]   "1" to refuse gaps (strict), "0" otherwise
//	ARGV[6..] the mutation's arguments, seen by the body as ARGV[1..]
//
// Replies as bodyTail's, plus {2, last} for a duplicate and {3, last} for a
// gap, both stored at the outcome key. The last sequence counts only when
// the sequence key's token equals the highest token: the script without
// sequences raises the token and leaves the sequence key behind. Sequences
// are compared and incremented as decimal strings, like tokens.
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
`

// seqTailFor is seqTail, or, with the GuardReappliesEqualSequence mutant
// switched on, a tail that applies a write whose sequence equals the last.
func seqTailFor() string {
	if failpoint.Enabled(failpoint.GuardReappliesEqualSequence) {
		return strings.Replace(seqTail, "if not __fence_less(last, seq) then", "if __fence_less(seq, last) then", 1)
	}
	return seqTail
}

// wrapBody puts body first, so that it cannot refer to the wrapper's locals.
func wrapBody(body, tail string) string {
	var b strings.Builder
	b.Grow(len(bodyHead) + len(body) + len(tail))
	b.WriteString(bodyHead)
	b.WriteString(body)
	b.WriteString(tail)
	return b.String()
}

// Bodies of the built-in mutations. Each can fail only on its first
// redis.call (a key of the wrong type), so an error never leaves part of a
// mutation applied.
var (
	// ARGV[1] = value; ARGV[2] = "" (no expiry), "keep" (KEEPTTL) or a
	// number of milliseconds.
	setScript = NewScript(`
local mode = ARGV[2]
if mode == '' then
	return redis.call('SET', KEYS[1], ARGV[1])
elseif mode == 'keep' then
	return redis.call('SET', KEYS[1], ARGV[1], 'KEEPTTL')
end
return redis.call('SET', KEYS[1], ARGV[1], 'PX', mode)
`)

	// One DEL per key: unpack of a long KEYS list would overflow Lua's
	// stack, and DEL cannot fail on a key's type.
	delScript = NewScript(`
local n = 0
for i = 1, #KEYS do
	n = n + redis.call('DEL', KEYS[i])
end
return n
`)

	// ARGV = field, value, field, value, ... One HSET per pair for the same
	// reason as DEL; if the key has the wrong type the first HSET fails
	// before anything is written.
	hsetScript = NewScript(`
local n = 0
for i = 1, #ARGV, 2 do
	n = n + redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
end
return n
`)
)
