package client_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencedio/fenced/api/fenced/v1/fencedv1connect"
	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/internal/testutil"
)

// TestCloseLeavesNothingRunning: Close ends the client's leases and returns
// only once nothing the client started is left running: renewals, the
// renewal stream, a release in flight after a loss, leader searches and the
// endpoint sync. Not parallel: it looks at every goroutine of the process.
func TestCloseLeavesNothingRunning(t *testing.T) {
	fake := &fakeService{hangRelease: true}
	_, h := fencedv1connect.NewLeaseServiceHandler(fake)
	before := testutil.Goroutines()
	c, err := client.New(client.Config{
		Endpoints:  []string{"http://a.fenced.test", "http://b.fenced.test"}, // a leader search at the first call
		HTTPClient: inProcess{h}, TTL: 3 * time.Second, RenewInterval: 10 * time.Millisecond,
		RequestTimeout: 300 * time.Millisecond, AutoSyncInterval: time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	var leases []*client.Lease
	for _, key := range []string{"a", "b", "c"} {
		l, err := c.Acquire(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l)
	}
	// Its release hangs until RequestTimeout, and Close waits for it.
	leases[0].MarkLost(errors.New("stale"))

	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if left := testutil.GoroutinesSince(before, "fencedio/fenced/client."); len(left) > 0 {
		t.Fatalf("%d goroutines of the client still running after Close:\n%s", len(left), strings.Join(left, "\n\n"))
	}
	for _, l := range leases[1:] {
		if err := l.Err(); !errors.Is(err, client.ErrLost) || !errors.Is(err, client.ErrClosed) {
			t.Errorf("lease %s after Close: %v, want ErrLost and ErrClosed", l.Key(), err)
		}
	}
	if got := len(fake.released()); got != 3 {
		t.Errorf("%d releases, want 3: Close releases the leases it ends", got)
	}
	if _, err := c.Acquire(context.Background(), "d"); !errors.Is(err, client.ErrClosed) {
		t.Errorf("Acquire after Close: %v, want ErrClosed", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}
