package forward

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/fencedio/fenced/server/internal/api"
	"github.com/fencedio/fenced/server/internal/apierr"
)

// TestLeaderAddr: the leader's address, "" when this node leads; with no
// leader known, the one that appears within 2 heartbeat timeouts.
func TestLeaderAddr(t *testing.T) {
	l := newFakeLeadership()
	f := newTestForwarder(context.Background(), l, 5*time.Second)
	ctx := context.Background()

	l.set("10.0.0.2:7000", false)
	if addr, err := f.LeaderAddr(ctx); addr != "10.0.0.2:7000" || err != nil {
		t.Errorf("LeaderAddr with a leader known: %q, %v", addr, err)
	}
	l.set("10.0.0.1:7000", true)
	if addr, err := f.LeaderAddr(ctx); addr != "" || err != nil {
		t.Errorf("LeaderAddr on the leader: %q, %v, want \"\"", addr, err)
	}
	if c, err := f.Leader(ctx); c != nil || err != nil {
		t.Errorf("Leader on the leader: %v, %v, want none", c, err)
	}

	l.set("", false)
	time.AfterFunc(100*time.Millisecond, func() { l.set("10.0.0.3:7000", false) })
	start := time.Now()
	addr, err := f.LeaderAddr(ctx)
	if addr != "10.0.0.3:7000" || err != nil {
		t.Errorf("LeaderAddr waiting for a leader: %q, %v", addr, err)
	}
	if waited := time.Since(start); waited < 100*time.Millisecond {
		t.Errorf("LeaderAddr answered after %v, before a leader was known", waited)
	}
	if c, err := f.Leader(ctx); err != nil || c != f.LeaseClient("10.0.0.3:7000") {
		t.Errorf("Leader: %v, %v, want the client of 10.0.0.3:7000", c, err)
	}
}

// TestLeaderAddrGivesUp: with no leader known, LeaderAddr gives up after 2
// heartbeat timeouts, as not ready; before that when the caller's context
// ends (its error) or the node's (not ready).
func TestLeaderAddrGivesUp(t *testing.T) {
	const heartbeat = 100 * time.Millisecond
	l := newFakeLeadership()
	base, cancelBase := context.WithCancel(context.Background())
	defer cancelBase()
	f := newTestForwarder(base, l, heartbeat)

	start := time.Now()
	addr, err := f.LeaderAddr(context.Background())
	waited := time.Since(start)
	if addr != "" || !errors.Is(err, apierr.ErrNotReady) {
		t.Errorf("LeaderAddr with no leader: %q, %v, want %v", addr, err, apierr.ErrNotReady)
	}
	if waited < 2*heartbeat || waited > 2*heartbeat+5*time.Second {
		t.Errorf("LeaderAddr gave up after %v, want 2 heartbeat timeouts (%v)", waited, 2*heartbeat)
	}
	if l.timesAsked() < 2 {
		t.Errorf("LeaderAddr asked who leads %d times while it waited, want it to look again", l.timesAsked())
	}

	slow := newTestForwarder(base, l, time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := slow.LeaderAddr(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("LeaderAddr whose caller's deadline passed: %v, want %v", err, context.DeadlineExceeded)
	}
	time.AfterFunc(50*time.Millisecond, cancelBase)
	if _, err := slow.LeaderAddr(context.Background()); !errors.Is(err, apierr.ErrNotReady) {
		t.Errorf("LeaderAddr when the node's context ended: %v, want %v", err, apierr.ErrNotReady)
	}
}

// TestLeaderFor: a call this node serves goes nowhere; a call forwarded
// once is never forwarded again, and refused as not ready without asking
// who leads; any other goes to the leader, or is refused as unavailable
// with no leader known.
func TestLeaderFor(t *testing.T) {
	l := newFakeLeadership()
	l.set("10.0.0.2:7000", false)
	f := newTestForwarder(context.Background(), l, 10*time.Millisecond)
	ctx := context.Background()

	if addr, err := f.LeaderFor(ctx, http.Header{}, true); addr != "" || err != nil || l.timesAsked() != 0 {
		t.Errorf("LeaderFor a call served here: %q, %v (asked %d times who leads)", addr, err, l.timesAsked())
	}
	forwarded := http.Header{}
	forwarded.Set(api.ForwardedHeader, "n2")
	addr, err := f.LeaderFor(ctx, forwarded, false)
	if addr != "" || connect.CodeOf(err) != connect.CodeUnavailable || !errors.Is(err, apierr.ErrNotReady) {
		t.Errorf("LeaderFor a forwarded call: %q, %v, want unavailable %v", addr, err, apierr.ErrNotReady)
	}
	if want := apierr.Connect(apierr.ErrNotReady).Error(); err != nil && err.Error() != want {
		t.Errorf("LeaderFor a forwarded call: %q, want %q", err.Error(), want)
	}
	if l.timesAsked() != 0 {
		t.Errorf("LeaderFor a forwarded call asked %d times who leads", l.timesAsked())
	}
	if addr, err := f.LeaderFor(ctx, http.Header{}, false); addr != "10.0.0.2:7000" || err != nil {
		t.Errorf("LeaderFor a call to forward: %q, %v", addr, err)
	}
	l.set("", false)
	if addr, err := f.LeaderFor(ctx, http.Header{}, false); addr != "" || connect.CodeOf(err) != connect.CodeUnavailable {
		t.Errorf("LeaderFor with no leader: %q, %v, want unavailable", addr, err)
	}
}
