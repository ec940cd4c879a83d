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
	"github.com/fencedio/fenced/lease"
)

// Events sent in batches below connect (watchBatcher) reach watchers of
// every protocol and codec whole and in order, as connect's own sends do.
func TestWatchBatchesEveryProtocol(t *testing.T) {
	s := newTestServer(t, Config{})
	base := serveTest(t, s)
	h2c := new(http.Protocols)
	h2c.SetUnencryptedHTTP2(true)
	for _, tc := range []struct {
		name string
		h2   bool
		opts []connect.ClientOption
	}{
		{"grpc", true, []connect.ClientOption{connect.WithGRPC()}},
		{"grpc-json", true, []connect.ClientOption{connect.WithGRPC(), connect.WithProtoJSON()}},
		{"grpc-web", false, []connect.ClientOption{connect.WithGRPCWeb()}},
		{"connect-proto", false, nil},
		{"connect-json-h2c", true, []connect.ClientOption{connect.WithProtoJSON()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := &http.Transport{}
			if tc.h2 {
				tr.Protocols = h2c
			}
			t.Cleanup(tr.CloseIdleConnections)
			c := fencedv1connect.NewLeaseServiceClient(&http.Client{Transport: tr}, base, tc.opts...)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			prefix := "batch/" + tc.name + "/"
			// The first event is replayed: Watch answers its headers with it.
			after := max(s.fsm.View().Applied(), 1)
			if _, err := s.applyAsync(ctx, lease.Command{Op: lease.OpAcquire, Key: prefix + "first", ID: newLeaseID(), Owner: "o", TTL: time.Hour})(); err != nil {
				t.Fatal(err)
			}
			stream, err := c.Watch(ctx, connect.NewRequest(&fencedv1.WatchRequest{Prefix: prefix, AfterRevision: after}))
			if err != nil {
				t.Fatal(err)
			}
			defer stream.Close()
			if !stream.Receive() {
				t.Fatalf("first event: %v", stream.Err())
			}
			// Applied together, so that they reach the watcher in batches.
			const n = 200
			var waits []func() (lease.Result, error)
			for i := range n {
				waits = append(waits, s.applyAsync(ctx, lease.Command{Op: lease.OpAcquire, Key: fmt.Sprintf("%s%03d", prefix, i), ID: newLeaseID(), Owner: "o", TTL: time.Hour}))
			}
			for _, w := range waits {
				if _, err := w(); err != nil {
					t.Fatal(err)
				}
			}
			last := stream.Msg().GetEvent().GetRevision()
			seen := map[string]bool{}
			for range n {
				if !stream.Receive() {
					t.Fatalf("after %d events: %v", len(seen), stream.Err())
				}
				ev := stream.Msg().GetEvent()
				if ev.GetType() != fencedv1.Event_ACQUIRED || ev.GetRevision() <= last || seen[ev.GetLease().GetKey()] {
					t.Fatalf("event %v after revision %d, want a new ACQUIRED after it", ev, last)
				}
				if ev.GetLease().LeaseId != nil {
					t.Fatalf("event %v carries the lease ID, which only its holder may see", ev)
				}
				last = ev.GetRevision()
				seen[ev.GetLease().GetKey()] = true
			}
		})
	}
}
