package client_test

import (
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/internal/fencedtest"
	"github.com/prometheus/client_golang/prometheus"
)

// A watcher whose callback stops taking events, over HTTP/1.1, is cut by
// the server once its connection holds more than StreamUnackedBytes
// unacknowledged: when the callback goes on, it gets the events sent
// before the cut, then Resync last, and Watch returns nil, so that the
// caller re-reads (ListRevision) and watches again.
func TestWatchCutOffEndsWithResync(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the bound on unacknowledged bytes needs Linux")
	}
	t.Parallel()
	cfg := fencedtest.Config(t)
	cfg.StreamUnackedBytes = 16 << 10
	reg := prometheus.NewRegistry()
	cfg.Registerer, cfg.Gatherer = reg, reg
	srv := fencedtest.StartConfig(t, cfg)
	watcher := srv.Client(t, client.Config{TTL: time.Minute, HTTPClient: &http.Client{Transport: &http.Transport{}}})
	writer := srv.Client(t, client.Config{TTL: time.Minute})
	ctx := t.Context()

	cut := make(chan struct{})
	var events []client.Event
	done := make(chan error, 1)
	go func() {
		done <- watcher.Watch(ctx, "cut/", 0, func(e client.Event) error {
			if len(events) == 0 {
				<-cut // stop taking events until the server has cut the stream
			}
			events = append(events, e)
			return nil
		})
	}()
	owner := strings.Repeat("o", 200)
	for i := 0; cuts(t, reg) == 0; i++ {
		if i == 20_000 {
			t.Fatalf("the server did not cut a watcher that takes no events after %d transitions", 2*i)
		}
		l, err := writer.Acquire(ctx, fmt.Sprintf("cut/%s/%d", strings.Repeat("k", 200), i), client.WithOwner(owner))
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	close(cut)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Watch after the cut: %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Watch did not return after the server cut its stream")
	}
	if len(events) < 2 || events[len(events)-1].Type != client.Resync {
		t.Fatalf("the watcher got %d events, the last %+v; want transitions, then Resync last", len(events), events[len(events)-1])
	}
}

// cuts is the server's count of streams cut for their unacknowledged bytes.
func cuts(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if mf.GetName() == "fenced_limit_refusals_total" && l.GetValue() == "stream-unacked-bytes" {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
