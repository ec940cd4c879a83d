package raftlog

import (
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// slowStore takes delay over every append, and fails it with err.
type slowStore struct {
	raft.LogStore
	delay time.Duration
	err   error
}

func (s *slowStore) StoreLogs(logs []*raft.Log) error {
	time.Sleep(s.delay)
	if s.err != nil {
		return s.err
	}
	return s.LogStore.StoreLogs(logs)
}

// Timed observes every append once, StoreLog and StoreLogs alike, with
// its duration, and passes failures through, observed too.
func TestTimedObservesEveryWrite(t *testing.T) {
	inner := &slowStore{LogStore: raft.NewInmemStore(), delay: 10 * time.Millisecond}
	var seen []float64
	s := &Timed{LogStore: inner, Observe: func(sec float64) { seen = append(seen, sec) }}
	if err := s.StoreLog(&raft.Log{Index: 1}); err != nil {
		t.Fatal(err)
	}
	if err := s.StoreLogs([]*raft.Log{{Index: 2}, {Index: 3}}); err != nil {
		t.Fatal(err)
	}
	inner.err = errors.New("disk gone")
	if err := s.StoreLogs([]*raft.Log{{Index: 4}}); !errors.Is(err, inner.err) {
		t.Fatalf("failed append answered %v, want %v", err, inner.err)
	}
	if len(seen) != 3 {
		t.Fatalf("%d writes observed, want 3", len(seen))
	}
	for i, sec := range seen {
		if sec < inner.delay.Seconds() || sec > 10 {
			t.Errorf("write %d took %vs, want at least %v", i, sec, inner.delay)
		}
	}
	if last, err := s.LastIndex(); err != nil || last != 3 {
		t.Errorf("last index %d %v, want 3", last, err)
	}
}
