package dashboard

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/lease"
	"github.com/fencedio/fenced/server/internal/fanout"
	"google.golang.org/protobuf/proto"
)

func TestLeaseFrame(t *testing.T) {
	got := string(LeaseFrame(lease.Event{Type: lease.Expired, Revision: 9},
		&fencedv1.Lease{Key: "k", Owner: "o", Token: 1<<60 + 1, TtlMs: 5000, RemainingMs: 0, LeaseId: proto.String("secret")}))
	want := "event: lease\ndata: {\"type\":\"EXPIRED\",\"revision\":9,\"lease\":" +
		"{\"key\":\"k\",\"owner\":\"o\",\"token\":\"1152921504606846977\",\"ttlMs\":5000,\"remainingMs\":0}}\n\n"
	if got != want {
		t.Errorf("frame\n%q\nwant\n%q", got, want)
	}
}

func TestSnapshotJSON(t *testing.T) {
	got := string(SnapshotJSON(4, []*fencedv1.Lease{{Key: "a", Token: 1<<53 + 1, LeaseId: proto.String("secret")}}))
	want := `{"revision":4,"leases":[{"key":"a","owner":"","token":"9007199254740993","ttlMs":0,"remainingMs":0}]}`
	if got != want {
		t.Errorf("snapshot %s, want %s", got, want)
	}
	if got := string(SnapshotJSON(0, nil)); got != `{"revision":0,"leases":[]}` {
		t.Errorf("empty snapshot %s: the page reads a list", got)
	}
}

func TestNewWriterNeedsFlusher(t *testing.T) {
	var w struct{ http.ResponseWriter }
	if NewWriter(w, 0, nil) != nil {
		t.Error("a writer for a response that cannot flush")
	}
}

func transition(key string, rev uint64) lease.Event {
	return lease.Event{Type: lease.Acquired, Lease: lease.Lease{Key: key, Token: rev}, Revision: rev}
}

// frameOf names a transition's frame by its key and revision.
func frameOf(ev lease.Event) []byte {
	return frame("lease", fmt.Appendf(nil, "%s@%d", ev.Lease.Key, ev.Revision))
}

// streamEvents serves st to a client and returns each event it reads as
// "name data", until the stream ends.
func streamEvents(t *testing.T, st func(ctx context.Context) Stream, until string) []string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st(r.Context()).Serve(r.Context(), NewWriter(w, time.Second, nil))
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type %q", ct)
	}
	var got []string
	sc := bufio.NewScanner(resp.Body)
	var name string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			got = append(got, name+" "+strings.TrimPrefix(line, "data: "))
			if got[len(got)-1] == until {
				return got
			}
		}
	}
	return got
}

// The snapshot goes first, then the replay, then the transitions after the
// snapshot's revision, each once and in order; those at or before it are
// in the snapshot and are not sent again.
func TestStreamOrder(t *testing.T) {
	h := fanout.NewHub(16, 16, func(lease.Event) *fencedv1.Event { return &fencedv1.Event{} })
	done := make(chan struct{})
	defer close(done)
	go h.Run(done)
	free := func(context.Context) (func(), error) { return func() {}, nil }
	got := streamEvents(t, func(context.Context) Stream {
		sub, replay, _ := h.Subscribe("k", 0)
		h.Publish(transition("k/1", 3)) // in the snapshot
		h.Publish(transition("k/2", 5))
		h.Publish(transition("other", 6))
		h.Publish(transition("k/3", 7))
		return Stream{Sub: sub, Snapshot: []byte(`{"revision":3}`), Replay: replay, Revision: 3, Frame: frameOf, Slot: free}
	}, "lease k/3@7")
	want := []string{`snapshot {"revision":3}`, "lease k/2@5", "lease k/3@7"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

// A stream whose subscription is cut off says "resync" and ends.
func TestStreamResync(t *testing.T) {
	h := fanout.NewHub(16, 2, func(lease.Event) *fencedv1.Event { return &fencedv1.Event{} })
	done := make(chan struct{})
	defer close(done)
	go h.Run(done)
	first := true
	held := make(chan struct{})
	slot := func(ctx context.Context) (func(), error) {
		if first { // the snapshot's write
			first = false
			return func() {}, nil
		}
		// The transitions' write waits while the queue overflows.
		select {
		case <-held:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return func() {}, nil
	}
	var sub *fanout.Subscription
	got := streamEvents(t, func(context.Context) Stream {
		sub, _, _ = h.Subscribe("", 0)
		go func() {
			for rev := uint64(1); ; rev++ {
				h.Publish(transition("a", rev))
				select {
				case <-sub.Lost():
					close(held)
					return
				default:
				}
			}
		}()
		return Stream{Sub: sub, Snapshot: []byte("{}"), Frame: frameOf, Slot: slot}
	}, "resync {}")
	if got[0] != "snapshot {}" || got[len(got)-1] != "resync {}" {
		t.Errorf("got %q, want the snapshot first and resync last", got)
	}
}
