package rejections

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/api/fenced/v1/fencedv1connect"
)

// peer is a node that serves the relays opened to it: it records each
// one's header, sends what the test hands it, and says when one ends.
type peer struct {
	fencedv1connect.UnimplementedLeaseServiceHandler
	addr   string
	opened chan http.Header
	send   chan *fencedv1.Event
	drop   chan struct{}
	closed chan struct{}
	done   chan struct{} // closed when the test ends
}

func newPeer(t *testing.T) *peer {
	p := &peer{opened: make(chan http.Header, 4), send: make(chan *fencedv1.Event),
		drop: make(chan struct{}), closed: make(chan struct{}, 4), done: make(chan struct{})}
	_, h := fencedv1connect.NewLeaseServiceHandler(p)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(p.done) }) // first: Close waits for the streams
	p.addr = strings.TrimPrefix(srv.URL, "http://")
	return p
}

func (p *peer) Watch(ctx context.Context, req *connect.Request[fencedv1.WatchRequest], stream *connect.ServerStream[fencedv1.WatchResponse]) error {
	defer func() { p.closed <- struct{}{} }()
	if !req.Msg.GetRejections() {
		return connect.NewError(connect.CodeInvalidArgument, nil)
	}
	p.opened <- req.Header()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-p.drop:
			return nil
		case <-p.done:
			return nil
		case ev := <-p.send:
			if err := stream.Send(&fencedv1.WatchResponse{Event: ev}); err != nil {
				return err
			}
		}
	}
}

// leader is the view of the leader a test steers: change names another.
type leader struct {
	mu    sync.Mutex
	addr  string
	epoch context.Context
	end   context.CancelFunc
	asked chan string // each address Addr answered
}

func newLeader(addr string) *leader {
	l := &leader{addr: addr, asked: make(chan string, 16)}
	l.epoch, l.end = context.WithCancel(context.Background())
	return l
}

func (l *leader) Epoch() context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.epoch
}

func (l *leader) Addr(context.Context) (string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case l.asked <- l.addr:
	default: // the test reads only the first answers
	}
	return l.addr, nil
}

func (l *leader) Watch(ctx context.Context, addr string, req *connect.Request[fencedv1.WatchRequest]) (*connect.ServerStreamForClient[fencedv1.WatchResponse], error) {
	return fencedv1connect.NewLeaseServiceClient(http.DefaultClient, "http://"+addr).Watch(ctx, req)
}

func (l *leader) change(addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.end()
	l.addr = addr
	l.epoch, l.end = context.WithCancel(context.Background())
}

// tracked counts the goroutines a relay spawns and waits for them.
type tracked struct {
	wg      sync.WaitGroup
	mu      sync.Mutex
	spawned int
}

func (g *tracked) spawn(f func()) bool {
	g.mu.Lock()
	g.spawned++
	g.mu.Unlock()
	g.wg.Go(f)
	return true
}

func (g *tracked) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.spawned
}

func newRelay(base context.Context, l Leader, g *tracked, retry time.Duration) (*Relay, chan *fencedv1.Rejection) {
	published := make(chan *fencedv1.Rejection, 16)
	return &Relay{Base: base, Spawn: g.spawn, Leader: l, Retry: retry, Log: slog.New(slog.DiscardHandler),
		Publish: func(e *fencedv1.Rejection) { published <- e }}, published
}

// push sends ev on the relay open at p.
func (p *peer) push(t *testing.T, ev *fencedv1.Event) {
	t.Helper()
	select {
	case p.send <- ev:
	case <-time.After(10 * time.Second):
		t.Fatal("no relay open to send on")
	}
}

func rejected(resource string) *fencedv1.Event {
	return &fencedv1.Event{Type: fencedv1.Event_REJECTED, Rejection: &fencedv1.Rejection{Scope: "k", Resource: resource}}
}

func receive[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s", what)
		panic("unreachable")
	}
}

func expect(t *testing.T, published <-chan *fencedv1.Rejection, resource string) {
	t.Helper()
	if got := receive(t, published, "relayed rejection "+resource).GetResource(); got != resource {
		t.Fatalf("relayed %q, want %q", got, resource)
	}
}

// The relay runs one goroutine while the node has rejection watchers: idle
// while the node leads, following the leader otherwise, moving with it,
// publishing its REJECTED events only, and ending with the last watcher.
func TestRelayFollowsLeader(t *testing.T) {
	a, b := newPeer(t), newPeer(t)
	l := newLeader("") // this node leads
	var g tracked
	r, published := newRelay(context.Background(), l, &g, time.Hour)
	leave1, leave2 := r.Join(), r.Join()
	if n := g.count(); n != 1 {
		t.Fatalf("two watchers spawned %d relays", n)
	}
	if addr := receive(t, l.asked, "leader asked for"); addr != "" {
		t.Fatalf("leader %q", addr)
	}
	l.change(a.addr)
	if h := receive(t, a.opened, "relay at a"); h.Get(RelayHeader) != "true" {
		t.Fatalf("relay opened without %s: %v", RelayHeader, h)
	}
	a.push(t, &fencedv1.Event{Type: fencedv1.Event_ACQUIRED, Rejection: &fencedv1.Rejection{Resource: "not a rejection"}})
	a.push(t, rejected("r1"))
	expect(t, published, "r1")

	l.change(b.addr)
	receive(t, a.closed, "relay at a closed on a leader change")
	receive(t, b.opened, "relay at b")
	b.push(t, rejected("r2"))
	expect(t, published, "r2")

	leave1()
	leave1() // a second call counts for nothing
	b.push(t, rejected("r3"))
	expect(t, published, "r3")
	leave2()
	receive(t, b.closed, "relay closed after the last watcher left")
	g.wg.Wait()

	r.Join()()
	if n := g.count(); n != 2 {
		t.Errorf("a watcher after the relay stopped spawned %d relays in all, want 2", n)
	}
	g.wg.Wait()
}

// A relay whose stream ends opens it again after Retry, at the same leader.
func TestRelayRetries(t *testing.T) {
	a := newPeer(t)
	var g tracked
	r, published := newRelay(context.Background(), newLeader(a.addr), &g, time.Millisecond)
	leave := r.Join()
	receive(t, a.opened, "relay")
	select {
	case a.drop <- struct{}{}:
	case <-time.After(10 * time.Second):
		t.Fatal("no relay open to drop")
	}
	receive(t, a.opened, "relay opened again")
	a.push(t, rejected("r1"))
	expect(t, published, "r1")
	leave()
	g.wg.Wait()
}

// The relay ends with the node's context, watchers or not.
func TestRelayEndsWithBase(t *testing.T) {
	a := newPeer(t)
	base, cancel := context.WithCancel(context.Background())
	var g tracked
	r, _ := newRelay(base, newLeader(a.addr), &g, time.Hour)
	defer r.Join()()
	receive(t, a.opened, "relay")
	cancel()
	receive(t, a.closed, "relay closed")
	g.wg.Wait()
}
