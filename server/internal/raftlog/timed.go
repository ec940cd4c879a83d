package raftlog

import (
	"time"

	"github.com/hashicorp/raft"
)

// Timed measures how long raft's log writes take: each StoreLogs is one
// append to the WAL and its fsync. Observe is given the seconds of every
// write, failed ones included (a prometheus.Histogram's Observe).
type Timed struct {
	raft.LogStore
	Observe func(seconds float64)
}

func (s *Timed) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

func (s *Timed) StoreLogs(logs []*raft.Log) error {
	start := time.Now()
	err := s.LogStore.StoreLogs(logs)
	s.Observe(time.Since(start).Seconds())
	return err
}
