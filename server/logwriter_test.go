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
)

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
