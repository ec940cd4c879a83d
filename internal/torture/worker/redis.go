package worker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fenceredis"
	"github.com/fencedio/fenced/internal/torture/history"
)

// RedisAuditKey is the Redis list of scope's writes, in the order Redis
// applied them: each item is a RedisRecord, encoded by FormatRedisRecord.
func RedisAuditKey(prefix, scope string) string {
	return fenceredis.Key(scope, prefix+"audit")
}

// RedisGuardPrefix is the prefix of the guard's keys (highest token,
// sequence, call outcomes) for a run whose keys start with prefix.
func RedisGuardPrefix(prefix string) string { return prefix + "fence:" }

// FormatRedisRecord is an item of a scope's audit list.
func FormatRedisRecord(token, seq uint64, worker int, object string) string {
	return fmt.Sprintf("%d|%d|%d|%s", token, seq, worker, object)
}

// ParseRedisRecord decodes an item of an audit list.
func ParseRedisRecord(item string) (token, seq uint64, worker int, object string, err error) {
	f := strings.SplitN(item, "|", 4)
	if len(f) != 4 {
		return 0, 0, 0, "", fmt.Errorf("redis audit item %q: not token|sequence|worker|object", item)
	}
	var errs [3]error
	token, errs[0] = strconv.ParseUint(f[0], 10, 64)
	seq, errs[1] = strconv.ParseUint(f[1], 10, 64)
	worker, errs[2] = strconv.Atoi(f[2])
	if err := errors.Join(errs[:]...); err != nil {
		return 0, 0, 0, "", fmt.Errorf("redis audit item %q: %w", item, err)
	}
	return token, seq, worker, f[3], nil
}

// auditScript appends ARGV[1] to the scope's audit list KEYS[1], in the
// guard's script: the check, the write and the record of the token are one
// step.
var auditScript = fenceredis.NewScript(`return redis.call('RPUSH', KEYS[1], ARGV[1])`)

func (w *worker) openRedis() (func(), error) {
	w.rdb = redis.NewClient(&redis.Options{Addr: w.spec.RedisAddr, PoolSize: 2})
	g, err := fenceredis.New(w.rdb, fenceredis.Config{Prefix: RedisGuardPrefix(w.spec.RedisPrefix)})
	if err != nil {
		w.rdb.Close()
		return nil, err
	}
	w.rguard = g
	return func() { w.rdb.Close() }, nil
}

// redis makes a write to Redis through the fenceredis guard (an item
// appended to the scope's audit list), with the lease's next sequence for
// a share of them, resent while its outcome is unknown.
func (w *worker) redis(l *client.Lease) writeResult {
	w.writes++
	op := &history.Op{Kind: history.KindRedis, Key: l.Key(), Token: l.Token(), Object: objectName(l.Key(), w.spec.name(), w.writes)}
	if !w.spec.NoFencing {
		op.Sequence = w.nextSequence(l)
	}
	return w.resend(op, func(op *history.Op) writeResult { return w.redisOnce(l, op) })
}

func (w *worker) redisOnce(l *client.Lease, op *history.Op) writeResult {
	op.Deadline = l.Deadline().UnixNano()
	ctx, cancel := context.WithTimeout(context.Background(), w.spec.WriteTimeout)
	defer cancel()
	key := RedisAuditKey(w.spec.RedisPrefix, op.Key)
	item := FormatRedisRecord(op.Token, op.Sequence, w.spec.ID, op.Object)
	w.rec.Begin(op)
	var err error
	if w.spec.NoFencing {
		err = w.rdb.RPush(ctx, key, item).Err()
	} else {
		if op.Sequence != 0 {
			ctx = fence.WithSequence(ctx, op.Sequence)
		}
		_, err = w.rguard.Eval(ctx, op.Key, op.Token, auditScript, []string{key}, item)
	}
	return w.endGuardedWrite(op, l, err)
}
