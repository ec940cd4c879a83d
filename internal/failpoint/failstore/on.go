//go:build fenced_failpoints

package failstore

import (
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fencedio/fenced/internal/failpoint"
)

// enabled is failpoint.Enabled; tests switch mutants on through it.
var enabled = failpoint.Enabled

// WrapLogStore returns s, or with LogAckBeforeWrite switched on, a store
// whose StoreLogs returns at once and writes each batch lateWrite later;
// with failpoint.LogStallEnvVar set, its writes also stall while that file
// exists.
func WrapLogStore(s raft.LogStore) raft.LogStore {
	if path := os.Getenv(failpoint.LogStallEnvVar); path != "" {
		s = stallLogStore{LogStore: s, path: path}
	}
	if !enabled(failpoint.LogAckBeforeWrite) && !enabled(failpoint.LogAckEarly) {
		return s
	}
	l := &lateLogStore{LogStore: s, queue: make(chan []*raft.Log, 1024), delay: lateWrite}
	if !enabled(failpoint.LogAckBeforeWrite) {
		l.delay = 0 // LogAckEarly
	}
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
	delay   time.Duration // before each write
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
		if l.delay > 0 {
			time.Sleep(l.delay)
		}
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

// stallLogStore holds every write while its file exists.
type stallLogStore struct {
	raft.LogStore
	path string
}

func (s stallLogStore) StoreLog(l *raft.Log) error {
	s.stall()
	return s.LogStore.StoreLog(l)
}

func (s stallLogStore) StoreLogs(logs []*raft.Log) error {
	s.stall()
	return s.LogStore.StoreLogs(logs)
}

func (s stallLogStore) stall() {
	if _, err := os.Stat(s.path); err != nil {
		return
	}
	_ = os.WriteFile(s.path+".caught", nil, 0o644)
	for {
		time.Sleep(time.Millisecond)
		if _, err := os.Stat(s.path); err != nil {
			return
		}
	}
}

// WrapAckHandler returns h, or with failpoint.AckNotifyEnvVar set, a
// handler that sends one datagram to that socket after each successful
// unary Acquire, Renew or Release has been answered and flushed: "acquire",
// "renew" or "release". A send that would block for more than a
// millisecond is dropped.
func WrapAckHandler(h http.Handler) http.Handler {
	path := os.Getenv(failpoint.AckNotifyEnvVar)
	if path == "" {
		return h
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		panic("failpoint: " + failpoint.AckNotifyEnvVar + ": " + err.Error())
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := ackName(r.URL.Path)
		if name == "" {
			h.ServeHTTP(w, r)
			return
		}
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(sw, r)
		if sw.status != http.StatusOK {
			return
		}
		_ = http.NewResponseController(w).Flush()
		_ = conn.SetWriteDeadline(time.Now().Add(time.Millisecond))
		_, _ = conn.Write([]byte(name))
	})
}

// ackName names the acknowledgements WrapAckHandler reports.
func ackName(p string) string {
	for _, s := range []string{"/Acquire", "/Renew", "/Release"} {
		if strings.HasSuffix(p, s) && strings.Contains(p, "LeaseService") {
			return strings.ToLower(s[1:])
		}
	}
	return ""
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int)        { s.status = code; s.ResponseWriter.WriteHeader(code) }
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }
