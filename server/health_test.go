package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencedio/fenced/lease"
	"github.com/hashicorp/raft"
)

// gatedLogStore holds every append while closed, like a disk that hangs.
type gatedLogStore struct {
	raft.LogStore
	gate chan chan struct{} // receives a channel to wait on while held
}

// hold makes the next append wait until the returned letThrough is called,
// which the test's cleanup also does (before the node closes).
func (s *gatedLogStore) hold(t testing.TB) (letThrough func()) {
	gate := make(chan struct{})
	var open sync.Once
	letThrough = func() { open.Do(func() { close(gate) }) }
	t.Cleanup(letThrough)
	s.gate <- gate
	return letThrough
}

func (s *gatedLogStore) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

func (s *gatedLogStore) StoreLogs(logs []*raft.Log) error {
	select {
	case wait := <-s.gate:
		<-wait
	default:
	}
	return s.LogStore.StoreLogs(logs)
}

// A leader whose log writes hang still answers heartbeats; /healthz must
// say it cannot apply, and recover once the writes go through.
func TestHealthzReportsStalledApply(t *testing.T) {
	store := &gatedLogStore{gate: make(chan chan struct{}, 1)}
	s := newTestServer(t, Config{
		ApplyStallTimeout: 200 * time.Millisecond,
		wrapLogStore:      func(ls raft.LogStore) raft.LogStore { store.LogStore = ls; return store },
	})
	health := func() (int, string) {
		rec := httptest.NewRecorder()
		s.healthz(rec, httptest.NewRequest("GET", "/healthz", nil))
		return rec.Code, rec.Body.String()
	}
	if code, body := health(); code != http.StatusOK {
		t.Fatalf("healthy node: %d %s", code, body)
	}
	release := make(chan struct{})
	var unblock sync.Once
	t.Cleanup(func() { unblock.Do(func() { close(release) }) }) // before Close
	store.gate <- release
	done := make(chan error, 1)
	go func() {
		_, err := s.apply(context.Background(), lease.Command{Op: lease.OpAcquire, Key: "k", ID: newLeaseID(), Owner: "o", TTL: time.Minute})
		done <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body := health()
		if code == http.StatusServiceUnavailable {
			if !strings.Contains(body, "apply path stalled") {
				t.Fatalf("503 without the reason: %q", body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("healthz still %d %q with an apply hung for 10s", code, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	unblock.Do(func() { close(release) })
	if err := <-done; err != nil {
		t.Fatalf("apply after the disk recovered: %v", err)
	}
	if code, body := health(); code != http.StatusOK {
		t.Fatalf("after recovery: %d %s", code, body)
	}
}
