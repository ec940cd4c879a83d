package server

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/api/fenced/v1/fencedv1connect"
)

// A watcher the server cannot serve within its fan-out budget falls
// behind; past WatchBuffer events it gets what was queued, then RESYNC.
func TestWatcherShedWhenFanoutBudgetSpent(t *testing.T) {
	s := newTestServer(t, Config{WatchBuffer: 4})
	base := serveTest(t, s)
	giveBack := s.fanout.Seize() // no fan-out time left
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	c := fencedv1connect.NewLeaseServiceClient(&http.Client{Transport: tr}, base)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The call returns with the response headers, which come with the
	// first event.
	type opened struct {
		stream *connect.ServerStreamForClient[fencedv1.WatchResponse]
		err    error
	}
	open := make(chan opened, 1)
	go func() {
		stream, err := c.Watch(ctx, connect.NewRequest(&fencedv1.WatchRequest{Prefix: "shed/"}))
		open <- opened{stream, err}
	}()
	for s.hub.Watching() == 0 { // until the watcher subscribed
		time.Sleep(time.Millisecond)
	}
	for i := range 10 {
		if _, err := s.Acquire(ctx, fmt.Sprintf("shed/%d", i), "o", time.Minute, 0); err != nil {
			t.Fatal(err)
		}
	}
	for s.hub.Watching() != 0 { // until it is cut off
		time.Sleep(time.Millisecond)
	}
	giveBack()
	o := <-open
	if o.err != nil {
		t.Fatal(o.err)
	}
	stream := o.stream
	defer stream.Close()
	var last uint64
	for i := range 4 {
		if !stream.Receive() {
			t.Fatalf("event %d: %v", i, stream.Err())
		}
		ev := stream.Msg().GetEvent()
		if ev.GetType() != fencedv1.Event_ACQUIRED || ev.GetRevision() <= last {
			t.Fatalf("event %d: %v, want an ACQUIRED after revision %d", i, ev, last)
		}
		last = ev.GetRevision()
	}
	if !stream.Receive() || stream.Msg().GetEvent().GetType() != fencedv1.Event_RESYNC {
		t.Fatalf("after the queued events: %v %v, want RESYNC", stream.Msg().GetEvent(), stream.Err())
	}
}
