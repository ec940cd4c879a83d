package fenceredis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
)

// Bodies of the counter and hash mutations. Like the others (see script.go),
// each can fail only on its first redis.call (a key of the wrong type, a
// value that is not an integer, an overflow), so an error never leaves part
// of a mutation applied and never records the token.
var (
	// ARGV[1] = the increment, decimal.
	incrByScript = NewScript(`
return redis.call('INCRBY', KEYS[1], ARGV[1])
`)

	// ARGV[1] = field, ARGV[2] = the increment, decimal.
	hincrByScript = NewScript(`
return redis.call('HINCRBY', KEYS[1], ARGV[1], ARGV[2])
`)

	// ARGV = fields. One HDEL per field for the same reason as DEL (a long
	// unpack overflows Lua's stack); only the first can fail, on the key's
	// type, before anything is deleted.
	hdelScript = NewScript(`
local n = 0
for i = 1, #ARGV do
	n = n + redis.call('HDEL', KEYS[1], ARGV[i])
end
return n
`)
)

// Incr increments the integer at key by one, like INCR, if token is not
// stale for scope, and returns the new value. key must carry scope's hash
// tag (see Key).
func (g *Guard) Incr(ctx context.Context, scope string, token uint64, key string) (int64, error) {
	return g.IncrBy(ctx, scope, token, key, 1)
}

// IncrBy adds delta (which may be negative) to the integer at key, like
// INCRBY, if token is not stale for scope, and returns the new value. A key
// that holds no integer, or an overflow of 64 bits, is an error from Redis;
// then nothing is written and the token is not recorded. key must carry
// scope's hash tag (see Key).
func (g *Guard) IncrBy(ctx context.Context, scope string, token uint64, key string, delta int64) (int64, error) {
	res, err := g.run(ctx, "incrby", scope, token, incrByScript, []string{key}, strconv.FormatInt(delta, 10))
	return intResult("incrby", scope, res, err)
}

// HIncrBy adds delta to the integer in field of the hash at key, like
// HINCRBY, if token is not stale for scope, and returns the new value. key
// must carry scope's hash tag (see Key).
func (g *Guard) HIncrBy(ctx context.Context, scope string, token uint64, key, field string, delta int64) (int64, error) {
	res, err := g.run(ctx, "hincrby", scope, token, hincrByScript, []string{key}, field, strconv.FormatInt(delta, 10))
	return intResult("hincrby", scope, res, err)
}

// HDel removes fields from the hash at key, like HDEL, if token is not stale
// for scope, and returns how many of them existed. At least one field is
// required; key must carry scope's hash tag (see Key).
func (g *Guard) HDel(ctx context.Context, scope string, token uint64, key string, fields ...string) (int64, error) {
	if len(fields) == 0 {
		return 0, errors.New("fenceredis: hdel: no fields")
	}
	args := make([]any, len(fields))
	for i, f := range fields {
		args[i] = f
	}
	res, err := g.run(ctx, "hdel", scope, token, hdelScript, []string{key}, args...)
	return intResult("hdel", scope, res, err)
}

// intResult converts a script's integer reply.
func intResult(op, scope string, res any, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	n, ok := res.(int64)
	if !ok {
		return 0, fmt.Errorf("fenceredis: %s scope %q: unexpected result %T", op, scope, res)
	}
	return n, nil
}
