package server_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/api/fenced/v1/fencedv1connect"
	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/internal/fencedtest"
	"github.com/fencedio/fenced/internal/testutil"
)

// A release with a waiter in line hands the key over in the same log entry:
// the waiter's token is the release's revision, and nobody can take the key
// in between.
func TestReleaseHandsOverToWaiter(t *testing.T) {
	for _, ending := range []string{"release", "expiry"} {
		t.Run(ending, func(t *testing.T) {
			srv := fencedtest.Start(t)
			ctx := context.Background()
			c := srv.Client(t, client.Config{TTL: 5 * time.Second})
			rpc := fencedv1connect.NewLeaseServiceClient(http.DefaultClient, srv.URL)

			a, err := rpc.Acquire(ctx, connect.NewRequest(&fencedv1.AcquireRequest{Key: "h/k", Owner: "A", TtlMs: 300}))
			if err != nil {
				t.Fatal(err)
			}
			held := a.Msg.Lease
			stream, err := rpc.Watch(ctx, connect.NewRequest(&fencedv1.WatchRequest{Prefix: "h/", AfterRevision: held.Token - 1}))
			if err != nil {
				t.Fatal(err)
			}
			defer stream.Close()

			got := make(chan *client.Lease, 1)
			go func() {
				l, err := c.Acquire(ctx, "h/k", client.WithOwner("B"), client.WithWait(10*time.Second))
				if err != nil {
					t.Error(err)
				}
				got <- l
			}()
			waitForWaiters(t, srv, 1)
			if ending == "release" {
				if _, err := rpc.Release(ctx, connect.NewRequest(&fencedv1.ReleaseRequest{Key: "h/k", LeaseId: held.GetLeaseId()})); err != nil {
					t.Fatal(err)
				}
			} // else: A never renews; its lease expires after 300ms.
			b := <-got
			if b == nil {
				t.FailNow()
			}
			defer b.Release(ctx)

			var events []*fencedv1.Event
			for len(events) < 3 && stream.Receive() {
				events = append(events, stream.Msg().GetEvent())
			}
			if len(events) < 3 {
				t.Fatalf("watch ended early: %v", stream.Err())
			}
			end, grant := events[1], events[2]
			wantEnd := fencedv1.Event_RELEASED
			if ending == "expiry" {
				wantEnd = fencedv1.Event_EXPIRED
			}
			if end.GetType() != wantEnd || end.GetLease().GetToken() != held.Token || end.GetLease().GetLeaseId() != "" {
				t.Fatalf("second event %v, want %v of A's lease", end, wantEnd)
			}
			if grant.GetType() != fencedv1.Event_ACQUIRED || grant.GetLease().GetOwner() != "B" || grant.GetLease().GetToken() != b.Token() || grant.GetLease().GetLeaseId() != "" {
				t.Fatalf("third event %v, want B's grant", grant)
			}
			if b.Token() != end.GetRevision() || grant.GetRevision() != end.GetRevision() || b.Token() <= held.Token {
				t.Fatalf("B's token %d, end at revision %d, grant at %d, A's token %d: want one entry, higher token",
					b.Token(), end.GetRevision(), grant.GetRevision(), held.Token)
			}
		})
	}
}

func waitForWaiters(t *testing.T, srv *fencedtest.Server, n int) {
	t.Helper()
	testutil.Eventually(t, 5*time.Second, func() error {
		if got := srv.Stats().Waiters; got < n {
			return fmt.Errorf("%d waiters, want %d", got, n)
		}
		return nil
	})
}
