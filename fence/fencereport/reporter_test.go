package fencereport_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencereport"
	"github.com/fencedio/fenced/internal/testutil"
)

// recorder is a Sender that keeps what it is sent.
type recorder struct {
	mu      sync.Mutex
	batches [][]client.StaleRejection
}

func (r *recorder) ReportRejections(_ context.Context, rs []client.StaleRejection) (uint64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.batches = append(r.batches, append([]client.StaleRejection(nil), rs...))
	var n uint64
	for _, x := range rs {
		n += uint64(max(x.Count, 1))
	}
	return n, nil
}

// stuck is a Sender for a fenced that never answers.
type stuck struct{}

func (stuck) ReportRejections(ctx context.Context, _ []client.StaleRejection) (uint64, error) {
	<-ctx.Done()
	return 0, ctx.Err()
}

func nop(context.Context) error { return nil }

// reject makes n stale writes through a memory guard observed by obs: the
// first with token 1000+n accepted, then tokens 1000+n-1 down to 1000.
func reject(t testing.TB, g fence.Guard, n int) {
	ctx := context.Background()
	if err := g.Do(ctx, "jobs/1", uint64(1000+n), nop); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := g.Do(fence.WithOwner(ctx, "worker-A"), "jobs/1", uint64(1000+i), nop); !errors.Is(err, fence.ErrStaleToken) {
			t.Fatalf("write %d: %v", i, err)
		}
	}
}

func TestReporterCoalescesAndSends(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	rep, err := fencereport.New(fencereport.Config{Resource: "ledger-http", Sender: rec, FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	g := fence.NewMemory(fence.MemoryConfig{Observer: rep})
	ctx := context.Background()
	if err := g.Do(ctx, "jobs/1", 64, nop); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		_ = g.Do(fence.WithOwner(ctx, "worker-A"), "jobs/1", 63, nop)
	}
	_ = g.Do(ctx, "jobs/1", 62, nop)
	if got := rep.Pending(); got != 2 {
		t.Fatalf("pending entries %d, want 2 (three identical rejections share one)", got)
	}
	if err := rep.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if rep.Sent() != 4 || rep.Dropped() != 0 {
		t.Fatalf("sent %d dropped %d, want 4 and 0", rep.Sent(), rep.Dropped())
	}
	got := map[uint64]client.StaleRejection{}
	for _, b := range rec.batches {
		for _, r := range b {
			got[r.Presented] = r
		}
	}
	want := map[uint64]client.StaleRejection{
		63: {Scope: "jobs/1", Presented: 63, Highest: 64, Owner: "worker-A", Resource: "ledger-http", Count: 3},
		62: {Scope: "jobs/1", Presented: 62, Highest: 64, Resource: "ledger-http", Count: 1},
	}
	if len(got) != len(want) || got[63] != want[63] || got[62] != want[62] {
		t.Fatalf("sent %+v, want %+v", got, want)
	}
	// After Close, rejections are counted as dropped, never queued.
	_ = g.Do(ctx, "jobs/1", 61, nop)
	if rep.Dropped() != 1 || rep.Pending() != 0 {
		t.Fatalf("after Close: dropped %d pending %d", rep.Dropped(), rep.Pending())
	}
}

// TestReporterUnderFailure makes 10,000 rejections while fenced is down
// (nothing listens) or never answers: every write returns its rejection,
// the queue never exceeds its bound, and every rejection is either
// pending, sent or counted as dropped.
func TestReporterUnderFailure(t *testing.T) {
	t.Parallel()
	addr, err := testutil.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	down, err := client.New(client.Config{Endpoint: "http://" + addr, FailoverTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// Reading the body lets the server notice a client that gives up.
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		<-r.Context().Done()
	}))
	defer hang.Close()
	slow, err := client.New(client.Config{Endpoint: hang.URL})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		sender fencereport.Sender
	}{{"down", down}, {"slow", slow}, {"stuck", stuck{}}} {
		t.Run(tc.name, func(t *testing.T) {
			const queue, n = 64, 10_000
			rep, err := fencereport.New(fencereport.Config{Resource: "r", Sender: tc.sender, QueueSize: queue,
				BatchSize: 16, FlushInterval: time.Millisecond, SendTimeout: 20 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			bound := fence.ObserverFunc(func(context.Context, fence.Decision) {
				if p := rep.Pending(); p > queue {
					t.Errorf("queue holds %d entries, bound %d", p, queue)
				}
			})
			reject(t, fence.NewMemory(fence.MemoryConfig{Observer: fence.Observers{rep, bound}}), n)
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			rep.Close(ctx)
			if rep.Sent() != 0 {
				t.Errorf("sent %d to a fenced that is not there", rep.Sent())
			}
			if rep.Dropped() != n {
				t.Errorf("dropped %d, want all %d counted", rep.Dropped(), n)
			}
			if rep.Pending() != 0 {
				t.Errorf("pending %d after Close", rep.Pending())
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, cfg := range []fencereport.Config{
		{Sender: stuck{}},
		{Resource: "r"},
		{Resource: "bad\x00", Sender: stuck{}},
		{Resource: "r", Sender: stuck{}, BatchSize: 1001},
		{Resource: "r", Sender: stuck{}, QueueSize: -1},
	} {
		if _, err := fencereport.New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}

// A duplicate write is counted apart and never reported as stale, even when
// an observer is handed one with the tokens of a stale decision.
func TestReporterCountsDuplicatesApart(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	rep, err := fencereport.New(fencereport.Config{Resource: "ledger-http", Sender: rec, FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	g := fence.NewMemory(fence.MemoryConfig{Observer: rep})
	ctx := fence.WithSequence(context.Background(), 5)
	if err := g.Do(ctx, "jobs/1", 64, nop); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := g.Do(ctx, "jobs/1", 64, nop); !errors.Is(err, fence.ErrDuplicate) {
			t.Fatalf("repeated write: %v", err)
		}
	}
	rep.Observe(ctx, fence.Decision{Scope: "jobs/1", Presented: 1, Highest: 64, Duplicate: true, Sequence: 5})
	if err := rep.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if rep.Duplicates() != 4 || rep.Sent() != 0 || rep.Dropped() != 0 || len(rec.batches) != 0 {
		t.Fatalf("duplicates %d sent %d dropped %d batches %d; want 4, 0, 0, 0", rep.Duplicates(), rep.Sent(), rep.Dropped(), len(rec.batches))
	}
}
