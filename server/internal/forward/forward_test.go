package forward

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/server/internal/apierr"
	"github.com/hashicorp/raft"
)

// startWatching runs f.WatchLeader until the test ends and returns the
// channel it observes leader changes on.
func startWatching(t *testing.T, f *Forwarder, l *fakeLeadership, cancel context.CancelFunc) chan raft.Observation {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f.WatchLeader() }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case ch := <-l.observed:
		return ch
	case <-time.After(10 * time.Second):
		t.Fatal("WatchLeader did not observe leadership")
		return nil
	}
}

// TestLeaderChangeEndsForwardedCalls: a call forwarded to the leader ends
// at the next leader change this node observes, answered unavailable with
// apierr.ErrLeaderChanged's message; the change ends the epoch with that
// cause, and calls forwarded after it run in a new epoch.
func TestLeaderChangeEndsForwardedCalls(t *testing.T) {
	leader := startTestLeader(t)
	l := newFakeLeadership()
	l.set(leader.addr(), false)
	base, cancel := context.WithCancel(context.Background())
	f := newTestForwarder(base, l, time.Second)
	defer f.Close()
	changes := startWatching(t, f, l, cancel)

	epoch := f.Epoch()
	errc := make(chan error, 1)
	go func() {
		_, err := Call(f, context.Background(), func(ctx context.Context) (*connect.Response[fencedv1.GetResponse], error) {
			return f.LeaseClient(leader.addr()).Get(ctx, connect.NewRequest(&fencedv1.GetRequest{Key: "k"}))
		})
		errc <- err
	}()
	select {
	case <-leader.gets:
	case <-time.After(10 * time.Second):
		t.Fatal("the forwarded call did not reach the leader")
	}
	select {
	case err := <-errc:
		t.Fatalf("the forwarded call ended before the leader changed: %v", err)
	case <-time.After(50 * time.Millisecond):
	}

	changes <- raft.Observation{Data: raft.LeaderObservation{}}
	var err error
	select {
	case err = <-errc:
	case <-time.After(10 * time.Second):
		t.Fatal("a leader change did not end the forwarded call")
	}
	if connect.CodeOf(err) != connect.CodeUnavailable || !errors.Is(err, apierr.ErrLeaderChanged) {
		t.Errorf("forwarded call cut by a leader change answered %v (%v), want unavailable, %v", connect.CodeOf(err), err, apierr.ErrLeaderChanged)
	}
	if want := apierr.Connect(apierr.ErrLeaderChanged).Error(); err.Error() != want {
		t.Errorf("forwarded call cut by a leader change answered %q, want %q", err.Error(), want)
	}
	if cause := context.Cause(epoch); !errors.Is(cause, apierr.ErrLeaderChanged) {
		t.Errorf("the epoch of the call ended with %v, want %v", cause, apierr.ErrLeaderChanged)
	}
	if now := f.Epoch(); now == epoch || now.Err() != nil {
		t.Errorf("after the change the epoch is %v (ended: %v), want a new one", now, now.Err())
	}

	// A call forwarded after the change is not ended by it.
	resp, err := Call(f, context.Background(), func(ctx context.Context) (*connect.Response[fencedv1.ListResponse], error) {
		return f.LeaseClient(leader.addr()).List(ctx, connect.NewRequest(&fencedv1.ListRequest{}))
	})
	if err != nil || resp == nil {
		t.Errorf("call forwarded after the change: %v, %v", resp, err)
	}
}

// TestCallerEndsBeforeLeaderChange: a call whose caller's context ends is
// answered with that end, not as cut by a leader change.
func TestCallerEndsBeforeLeaderChange(t *testing.T) {
	f := New(Config{Base: context.Background()})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := Call(f, ctx, func(ctx context.Context) (*connect.Response[struct{}], error) {
		<-ctx.Done()
		return nil, connect.NewError(connect.CodeDeadlineExceeded, ctx.Err())
	})
	if connect.CodeOf(err) != connect.CodeDeadlineExceeded || errors.Is(err, apierr.ErrLeaderChanged) {
		t.Errorf("call whose deadline passed answered %v (%v), want deadline_exceeded", connect.CodeOf(err), err)
	}
}

// TestWatchLeaderEndsWithBase: WatchLeader returns when the node's context
// ends, and stops observing.
func TestWatchLeaderEndsWithBase(t *testing.T) {
	l := newFakeLeadership()
	base, cancel := context.WithCancel(context.Background())
	f := newTestForwarder(base, l, time.Second)
	done := make(chan struct{})
	go func() { defer close(done); f.WatchLeader() }()
	<-l.observed
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("WatchLeader did not return when its base context ended")
	}
	select {
	case <-l.stopped:
	default:
		t.Error("WatchLeader returned without stopping its observation")
	}
}

// TestClientsPerAddress: one LeaseService client is kept per address, and
// the clients of every service share one transport, so that calls to the
// same leader share a connection; Close closes it once idle.
func TestClientsPerAddress(t *testing.T) {
	leader := startTestLeader(t)
	f := newTestForwarder(context.Background(), newFakeLeadership(), time.Second)
	a, b := leader.addr(), "127.0.0.1:1"
	if f.LeaseClient(a) != f.LeaseClient(a) {
		t.Error("two LeaseService clients for one address")
	}
	if f.LeaseClient(a) == f.LeaseClient(b) {
		t.Error("one LeaseService client for two addresses")
	}

	ctx := context.Background()
	if _, err := f.LeaseClient(a).List(ctx, connect.NewRequest(&fencedv1.ListRequest{})); err != nil {
		t.Fatalf("List: %v", err)
	}
	if _, err := f.AdminClient(a).Revoke(ctx, connect.NewRequest(&fencedv1.RevokeRequest{Key: "k"})); err != nil {
		t.Fatalf("Revoke: %v", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+a+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Transport: f.Transport()}).Do(req)
	if err != nil {
		t.Fatalf("GET over the forwarder's transport: %v", err)
	}
	resp.Body.Close()
	news := 0
	for len(leader.conns) > 0 {
		if <-leader.conns == http.StateNew {
			news++
		}
	}
	if news != 1 {
		t.Errorf("three calls to one leader opened %d connections, want 1", news)
	}

	f.Close()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case s := <-leader.conns:
			if s == http.StateClosed {
				return
			}
		case <-deadline:
			t.Fatal("Close left the idle connection to the leader open")
		}
	}
}
