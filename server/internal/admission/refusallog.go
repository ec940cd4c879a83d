package admission

import (
	"log/slog"
	"sync"
	"time"
)

// RefusalLog logs refused connections at most once every RefusalLogEvery,
// with the number refused since the last record: a client that keeps
// connecting beyond its share must not flood the log. The zero RefusalLog
// is ready.
type RefusalLog struct {
	mu      sync.Mutex
	last    time.Time
	skipped int
}

// RefusalLogEvery is the least time between two records of a RefusalLog.
const RefusalLogEvery = 10 * time.Second

// Log records that a connection from addr (an address, or a network
// when network is set) was refused under its limit of connections, unless
// a record was written less than RefusalLogEvery ago.
func (r *RefusalLog) Log(log *slog.Logger, addr string, network bool, limit int) {
	r.mu.Lock()
	now := time.Now()
	if now.Sub(r.last) < RefusalLogEvery {
		r.skipped++
		r.mu.Unlock()
		return
	}
	skipped := r.skipped
	r.last, r.skipped = now, 0
	r.mu.Unlock()
	msg, flag := "connection refused: too many open from its address", "max-conns-per-client"
	if network {
		msg, flag = "connection refused: too many open from its network", "max-conns-per-network"
	}
	log.Warn(msg, "limit", flag,
		"client", addr, "max", limit, "refused_since_last_record", skipped)
}
