package torture

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencedio/fenced/internal/torture/check"
	"github.com/fencedio/fenced/internal/torture/worker"
)

// redisPrefix starts every Redis key of the run: the audit lists and the
// guard's keys.
func (e *engine) redisPrefix() string { return e.cfg.KeyPrefix + "redis:" }

// openRedis connects to Config.RedisAddr and checks that it answers.
func (e *engine) openRedis(ctx context.Context) error {
	e.rdb = redis.NewClient(&redis.Options{Addr: e.cfg.RedisAddr})
	if err := e.rdb.Ping(ctx).Err(); err != nil {
		e.rdb.Close()
		e.rdb = nil
		return fmt.Errorf("torture: redis %s: %w", e.cfg.RedisAddr, err)
	}
	return nil
}

// readRedis reads every key's audit list, in the order Redis applied the
// writes.
func (e *engine) readRedis(ctx context.Context) ([]check.RedisRecord, error) {
	var out []check.RedisRecord
	for _, k := range e.keys {
		items, err := e.rdb.LRange(ctx, worker.RedisAuditKey(e.redisPrefix(), k), 0, -1).Result()
		if err != nil {
			return nil, fmt.Errorf("torture: redis: %w", err)
		}
		for i, item := range items {
			tok, seq, w, obj, err := worker.ParseRedisRecord(item)
			if err != nil {
				return nil, fmt.Errorf("torture: redis: %w", err)
			}
			out = append(out, check.RedisRecord{Index: i, Scope: k, Token: tok, Sequence: seq, Worker: w, Object: obj})
		}
	}
	return out, nil
}

// dropRedis deletes the run's Redis keys (unless Config.KeepTables).
func (e *engine) dropRedis() {
	if e.rdb == nil {
		return
	}
	defer e.rdb.Close()
	if e.cfg.KeepTables {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	iter := e.rdb.Scan(ctx, 0, e.redisPrefix()+"*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		e.logf("redis: scan the run's keys: %v", err)
	}
	for len(keys) > 0 {
		n := min(len(keys), 500)
		if err := e.rdb.Del(ctx, keys[:n]...).Err(); err != nil {
			e.logf("redis: delete the run's keys: %v", err)
			return
		}
		keys = keys[n:]
	}
}
