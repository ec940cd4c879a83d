package server

import (
	"time"

	"github.com/fencedio/fenced/lease"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
)

// timedLogStore measures how long raft's log writes take: each StoreLogs is
// one append to the WAL and its fsync.
type timedLogStore struct {
	raft.LogStore
	fsync prometheus.Histogram
}

func (s *timedLogStore) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

func (s *timedLogStore) StoreLogs(logs []*raft.Log) error {
	start := time.Now()
	err := s.LogStore.StoreLogs(logs)
	s.fsync.Observe(time.Since(start).Seconds())
	return err
}

// raftCollectors exposes the node's raft position as gauges read at scrape
// time.
func raftCollectors(s *Server) []prometheus.Collector {
	gauge := func(name, help string, read func(r *raft.Raft) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 {
			if s.raft == nil {
				return 0
			}
			return read(s.raft)
		})
	}
	return []prometheus.Collector{
		gauge("fenced_raft_term", "Current raft term.", func(r *raft.Raft) float64 { return float64(r.CurrentTerm()) }),
		gauge("fenced_raft_commit_index", "Index of the last committed log entry known to this node.",
			func(r *raft.Raft) float64 { return float64(r.CommitIndex()) }),
		gauge("fenced_raft_applied_index", "Index of the last log entry applied to the lease state machine.",
			func(r *raft.Raft) float64 { return float64(r.AppliedIndex()) }),
	}
}

// recentlyExpired remembers the last expired lease of up to
// maxRecentlyExpired keys, so that the next grant can be logged as a
// takeover. Only the FSM goroutine uses it.
type recentlyExpired struct{ m map[string]lease.Lease }

const maxRecentlyExpired = 10_000

func (r *recentlyExpired) put(l lease.Lease) {
	if r.m == nil {
		r.m = make(map[string]lease.Lease)
	}
	if len(r.m) >= maxRecentlyExpired {
		for k := range r.m { // drop an arbitrary one: this is only for logs
			delete(r.m, k)
			break
		}
	}
	r.m[l.Key] = l
}

func (r *recentlyExpired) take(key string) (lease.Lease, bool) {
	l, ok := r.m[key]
	if ok {
		delete(r.m, key)
	}
	return l, ok
}
