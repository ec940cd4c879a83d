package election_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/client/election"
	"github.com/fencedio/fenced/internal/fencedtest"
	"github.com/fencedio/fenced/internal/testutil"
)

type result struct {
	l   *election.Leadership
	err error
}

func campaign(ctx context.Context, e *election.Elections, name, value string) <-chan result {
	ch := make(chan result, 1)
	go func() {
		l, err := e.Campaign(ctx, name, value)
		ch <- result{l, err}
	}()
	return ch
}

// A second candidate waits while the first leads and is elected when it
// resigns, with a higher token; Leader shows each in turn, and nobody after
// the last resigns.
func TestCampaignLeaderResign(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := fencedtest.Start(t)
	e := election.New(s.Client(t, client.Config{}))

	if _, err := e.Leader(ctx, "svc"); !errors.Is(err, election.ErrNoLeader) {
		t.Fatalf("Leader of an empty election: %v, want ErrNoLeader", err)
	}
	a, err := e.Campaign(ctx, "svc", "a:1")
	if err != nil {
		t.Fatal(err)
	}
	if a.Value() != "a:1" || a.Name() != "svc" || a.Token() == 0 || a.Err() != nil {
		t.Fatalf("leadership: value %q name %q token %d err %v", a.Value(), a.Name(), a.Token(), a.Err())
	}
	if got, err := e.Leader(ctx, "svc"); err != nil || got != (election.Leader{Value: "a:1", Token: a.Token()}) {
		t.Fatalf("Leader = %+v, %v; want a:1 with token %d", got, err, a.Token())
	}

	b := campaign(ctx, e, "svc", "b:1")
	// Let b's acquisition reach the server's line before a resigns: Observe
	// cannot see waiters, so look at the server's count of them.
	waitForWaiter(t, s)
	select {
	case r := <-b:
		t.Fatalf("b elected while a leads: %v", r.err)
	default:
	}
	if err := a.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(a.Err(), client.ErrReleased) {
		t.Fatalf("a.Err() after Resign = %v, want ErrReleased", a.Err())
	}
	r := <-b
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.l.Token() <= a.Token() {
		t.Fatalf("b's token %d is not above a's %d", r.l.Token(), a.Token())
	}
	if got, err := e.Leader(ctx, "svc"); err != nil || got.Value != "b:1" || got.Token != r.l.Token() {
		t.Fatalf("Leader = %+v, %v; want b:1", got, err)
	}
	if err := r.l.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	// Resigning twice is not an error: the leadership has ended either way.
	if err := r.l.Resign(ctx); err != nil {
		t.Fatalf("second Resign: %v", err)
	}
	if _, err := e.Leader(ctx, "svc"); !errors.Is(err, election.ErrNoLeader) {
		t.Fatalf("Leader after both resigned: %v, want ErrNoLeader", err)
	}
}

// A leader that stops renewing (paused, partitioned) loses its leadership
// by its local deadline; the next candidate is elected once the server
// expires the lease, with a higher token.
func TestLostLeadership(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := fencedtest.Start(t)
	e := election.New(s.Client(t, client.Config{TTL: 300 * time.Millisecond}))
	a, err := e.Campaign(ctx, "svc", "a")
	if err != nil {
		t.Fatal(err)
	}
	b := campaign(ctx, e, "svc", "b")
	a.Lease().Orphan()
	<-a.Done()
	if !errors.Is(a.Err(), client.ErrLost) {
		t.Fatalf("a.Err() = %v, want ErrLost", a.Err())
	}
	r := <-b
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.l.Token() <= a.Token() || r.l.Value() != "b" {
		t.Fatalf("b elected with token %d value %q after a's %d", r.l.Token(), r.l.Value(), a.Token())
	}
	r.l.Resign(ctx)
}

func TestCampaignErrors(t *testing.T) {
	t.Parallel()
	s := fencedtest.Start(t)
	e := election.New(s.Client(t, client.Config{}))
	if _, err := e.Campaign(context.Background(), "svc", strings.Repeat("v", 257)); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("Campaign with a 257-byte value: %v, want ErrInvalid", err)
	}
	if _, err := e.Campaign(context.Background(), "", "v"); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("Campaign with an empty name: %v, want ErrInvalid", err)
	}
	if _, err := e.Leader(context.Background(), "svc"); !errors.Is(err, election.ErrNoLeader) {
		t.Errorf("a refused campaign left a leader: %v", err)
	}

	a, err := e.Campaign(context.Background(), "svc", "a")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Resign(context.Background())
	ctx, cancel := context.WithCancel(context.Background())
	b := campaign(ctx, e, "svc", "b")
	waitForWaiter(t, s)
	cancel()
	if r := <-b; !errors.Is(r.err, context.Canceled) {
		t.Errorf("cancelled Campaign: %v, want context.Canceled", r.err)
	}
}

// Observe reports the current leader, then each new one in order, and
// nothing about other keys under the same prefix.
func TestObserve(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := fencedtest.Start(t)
	c := s.Client(t, client.Config{})
	e := election.New(c)
	a, err := e.Campaign(ctx, "svc", "a")
	if err != nil {
		t.Fatal(err)
	}

	octx, stop := context.WithCancel(ctx)
	seen := make(chan election.Leader, 10)
	observed := make(chan error, 1)
	go func() {
		observed <- e.Observe(octx, "svc", func(l election.Leader) error { seen <- l; return nil })
	}()
	if got := <-seen; got != (election.Leader{Value: "a", Token: a.Token()}) {
		t.Fatalf("first observed %+v, want a with token %d", got, a.Token())
	}
	other, err := c.Acquire(ctx, "svc/other", client.WithOwner("other"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Release(ctx)
	b := campaign(ctx, e, "svc", "b")
	waitForWaiter(t, s)
	a.Resign(ctx)
	r := <-b
	if r.err != nil {
		t.Fatal(r.err)
	}
	if got := <-seen; got != (election.Leader{Value: "b", Token: r.l.Token()}) {
		t.Fatalf("then observed %+v, want b with token %d", got, r.l.Token())
	}
	r.l.Resign(ctx)
	cc, err := e.Campaign(ctx, "svc", "c")
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Resign(ctx)
	if got := <-seen; got.Value != "c" {
		t.Fatalf("then observed %+v, want c", got)
	}
	stop()
	if err := <-observed; !errors.Is(err, context.Canceled) {
		t.Fatalf("Observe returned %v, want context.Canceled", err)
	}
	if len(seen) != 0 {
		t.Fatalf("Observe reported more: %+v", <-seen)
	}

	// fn's error ends Observe and is returned.
	errStop := errors.New("enough")
	if err := e.Observe(ctx, "svc", func(election.Leader) error { return errStop }); !errors.Is(err, errStop) {
		t.Fatalf("Observe with a failing fn: %v", err)
	}
}

// Run calls the callbacks in client-go's order: OnNewLeader with its own
// value, OnStartedLeading with a live leadership; when ctx ends it resigns,
// waits for OnStartedLeading to return, calls OnStoppedLeading, and
// returns ctx's error.
func TestRun(t *testing.T) {
	t.Parallel()
	s := fencedtest.Start(t)
	e := election.New(s.Client(t, client.Config{}))
	ctx, cancel := context.WithCancel(context.Background())
	var (
		mu     sync.Mutex
		events []string
	)
	log := func(s string) { mu.Lock(); events = append(events, s); mu.Unlock() }
	started := make(chan *election.Leadership, 1)
	err := e.Run(ctx, "svc", "me", election.Callbacks{
		OnNewLeader: func(id string) { log("new leader " + id) },
		OnStartedLeading: func(lctx context.Context, l *election.Leadership) {
			started <- l
			log("started")
			cancel()
			<-lctx.Done()
			log("work stopped")
		},
		OnStoppedLeading: func() { log("stopped") },
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run returned %v, want context.Canceled", err)
	}
	l := <-started
	if !errors.Is(l.Err(), client.ErrReleased) {
		t.Fatalf("leadership after Run: %v, want resigned", l.Err())
	}
	if _, err := e.Leader(context.Background(), "svc"); !errors.Is(err, election.ErrNoLeader) {
		t.Fatalf("Leader after Run: %v, want ErrNoLeader", err)
	}
	mu.Lock()
	defer mu.Unlock()
	got := strings.Join(events, ", ")
	if got != "new leader me, started, work stopped, stopped" {
		t.Fatalf("callbacks: %s", got)
	}
}

// Run returns the loss when the leadership is lost, after the work saw it.
func TestRunLost(t *testing.T) {
	t.Parallel()
	s := fencedtest.Start(t)
	e := election.New(s.Client(t, client.Config{}))
	stopped := make(chan struct{})
	err := e.Run(context.Background(), "svc", "me", election.Callbacks{
		OnStartedLeading: func(ctx context.Context, l *election.Leadership) {
			l.Lease().MarkLost(errors.New("a guard refused the token"))
			<-ctx.Done()
		},
		OnStoppedLeading: func() { close(stopped) },
	})
	if !errors.Is(err, client.ErrLost) {
		t.Fatalf("Run returned %v, want ErrLost", err)
	}
	select {
	case <-stopped:
	default:
		t.Fatal("OnStoppedLeading not called before Run returned")
	}
}

// waitForWaiter waits until one acquisition waits in line on s.
func waitForWaiter(t *testing.T, s *fencedtest.Server) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, func() error {
		if n := s.Stats().Waiters; n != 1 {
			return fmt.Errorf("%d waiters", n)
		}
		return nil
	})
}
