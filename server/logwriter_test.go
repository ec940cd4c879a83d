package server

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencedio/fenced/internal/testutil"
	"github.com/fencedio/fenced/lease"
	"github.com/hashicorp/raft"
)

// The state machine hands on the transitions of one applied batch
// together, in log order: what lets a server gather their records.
func TestFSMHandsOnABatchTogether(t *testing.T) {
	f := newFSM(0)
	var batches [][]lease.Event
	f.onEvents = func(events []lease.Event) { batches = append(batches, append([]lease.Event(nil), events...)) }
	var logs []*raft.Log
	for i := range 3 {
		c := lease.Command{Op: lease.OpAcquire, Key: fmt.Sprintf("k%d", i), ID: newLeaseID(), Owner: "o", TTL: time.Minute}
		data, err := c.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		logs = append(logs, &raft.Log{Index: uint64(i + 1), Term: 1, Type: raft.LogCommand, Data: data})
	}
	f.ApplyBatch(logs)
	if len(batches) != 1 || len(batches[0]) != 3 {
		t.Fatalf("onEvents calls %v, want one call with 3 transitions", batches)
	}
	for i, ev := range batches[0] {
		if want := fmt.Sprintf("k%d", i); ev.Type != lease.Acquired || ev.Lease.Key != want {
			t.Fatalf("transition %d: %v of %q, want an acquisition of %q", i, ev.Type, ev.Lease.Key, want)
		}
	}
}

// A server given its logger's writer writes every transition record whole,
// however the records were gathered.
func TestServerWritesEveryTransitionRecordThroughLogOutput(t *testing.T) {
	var out testutil.SyncBuffer
	lw := NewLogWriter(&out)
	s := newTestServer(t, Config{Logger: slog.New(slog.NewTextHandler(lw, nil)), LogOutput: lw})
	ctx := context.Background()
	const clients, cycles = 16, 20
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for c := range clients {
		wg.Go(func() {
			for range cycles {
				l, err := s.Acquire(ctx, fmt.Sprintf("k%d", c), "o", time.Minute, 0)
				if err == nil {
					err = s.Release(ctx, l.Key, l.ID)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var acquired, released int
	for _, w := range out.Writes() {
		if !strings.HasSuffix(w, "\n") {
			t.Fatalf("a write ends inside a record: %q", w)
		}
		for line := range strings.Lines(w) {
			switch {
			case strings.Contains(line, `msg="lease acquired"`):
				acquired++
			case strings.Contains(line, `msg="lease released"`):
				released++
			}
			if !bytes.HasPrefix([]byte(line), []byte("time=")) {
				t.Fatalf("a record does not start a line: %q", line)
			}
		}
	}
	if acquired != clients*cycles || released != clients*cycles {
		t.Fatalf("%d acquisition and %d release records, want %d each", acquired, released, clients*cycles)
	}
}
