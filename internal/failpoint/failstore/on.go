//go:build fenced_failpoints

package failstore

import (
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fencedio/fenced/internal/failpoint"
)

// enabled is failpoint.Enabled; tests switch mutants on through it.
var enabled = failpoint.Enabled

// WrapLogStore returns s, or with LogAckBeforeWrite switched on, a store
// whose StoreLogs returns at once and writes each batch lateWrite later.
func WrapLogStore(s raft.LogStore) raft.LogStore {
	if !enabled(failpoint.LogAckBeforeWrite) {
		return s
	}
	l := &lateLogStore{LogStore: s, queue: make(chan []*raft.Log, 1024)}
	l.written = sync.NewCond(&l.mu)
	go l.writer()
	return l
}

// lateWrite is how long an acknowledged batch stays unwritten: long enough
// for a kill aimed after an acknowledgement to land in the gap.
const lateWrite = 20 * time.Millisecond

// lateLogStore acknowledges StoreLogs before writing. Batches are written
// in order by one goroutine; every read waits until what was acknowledged
// is written, so raft itself sees a consistent log and only a crash shows
// the bug.
type lateLogStore struct {
	raft.LogStore
	queue   chan []*raft.Log
	mu      sync.Mutex
	written *sync.Cond // signalled when pending drops
	pending int        // batches acknowledged and not yet written
}

// wait blocks until every acknowledged batch is written.
func (l *lateLogStore) wait() {
	l.mu.Lock()
	for l.pending > 0 {
		l.written.Wait()
	}
	l.mu.Unlock()
}

func (l *lateLogStore) writer() {
	for batch := range l.queue {
		time.Sleep(lateWrite)
		if err := l.LogStore.StoreLogs(batch); err != nil {
			panic("failpoint: late log write: " + err.Error())
		}
		l.mu.Lock()
		l.pending--
		l.written.Broadcast()
		l.mu.Unlock()
	}
}

func (l *lateLogStore) StoreLog(log *raft.Log) error { return l.StoreLogs([]*raft.Log{log}) }

func (l *lateLogStore) StoreLogs(logs []*raft.Log) error {
	cp := make([]*raft.Log, len(logs))
	for i, lg := range logs {
		c := *lg
		cp[i] = &c
	}
	l.mu.Lock()
	l.pending++
	l.mu.Unlock()
	l.queue <- cp
	return nil
}

func (l *lateLogStore) FirstIndex() (uint64, error) { l.wait(); return l.LogStore.FirstIndex() }
func (l *lateLogStore) LastIndex() (uint64, error)  { l.wait(); return l.LogStore.LastIndex() }
func (l *lateLogStore) GetLog(i uint64, out *raft.Log) error {
	l.wait()
	return l.LogStore.GetLog(i, out)
}
func (l *lateLogStore) DeleteRange(lo, hi uint64) error {
	l.wait()
	return l.LogStore.DeleteRange(lo, hi)
}
