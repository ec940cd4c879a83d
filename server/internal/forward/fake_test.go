package forward

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/api/fenced/v1/fencedv1connect"
	"github.com/hashicorp/raft"
)

// fakeLeadership is a Leadership the test sets: the leader it reports, the
// times it was asked, and the channel a WatchLeader observes through.
type fakeLeadership struct {
	mu       sync.Mutex
	addr     string
	self     bool
	asked    int
	observed chan chan raft.Observation // each channel Observe was given
	stopped  chan struct{}              // closed by the stop Observe returned
}

func newFakeLeadership() *fakeLeadership {
	return &fakeLeadership{observed: make(chan chan raft.Observation, 1), stopped: make(chan struct{})}
}

func (l *fakeLeadership) set(addr string, self bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.addr, l.self = addr, self
}

func (l *fakeLeadership) Leader() (string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.asked++
	return l.addr, l.self
}

func (l *fakeLeadership) timesAsked() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.asked
}

func (l *fakeLeadership) Observe(ch chan raft.Observation) func() {
	l.observed <- ch
	return func() { close(l.stopped) }
}

// dial reaches a test server by its address, which stands for a raft
// address.
func dial(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}

// newTestForwarder returns a forwarder of leadership l under base, which
// dials test servers directly.
func newTestForwarder(base context.Context, l Leadership, heartbeat time.Duration) *Forwarder {
	return New(Config{Base: base, Leadership: l, Dial: dial, HeartbeatTimeout: heartbeat})
}

// testLeader is a leader's LeaseService (Get, List) and AdminService over
// unencrypted HTTP/2, as the peer port serves them. Get blocks until its
// caller goes away, after telling gets it arrived; List answers at once.
type testLeader struct {
	fencedv1connect.UnimplementedLeaseServiceHandler
	fencedv1connect.UnimplementedAdminServiceHandler
	gets  chan struct{}
	conns chan http.ConnState // every state change of the server's connections
	srv   *httptest.Server
}

func startTestLeader(t *testing.T) *testLeader {
	t.Helper()
	l := &testLeader{gets: make(chan struct{}, 16), conns: make(chan http.ConnState, 64)}
	mux := http.NewServeMux()
	mux.Handle(fencedv1connect.NewLeaseServiceHandler(l))
	mux.Handle(fencedv1connect.NewAdminServiceHandler(l))
	l.srv = httptest.NewUnstartedServer(mux)
	l.srv.Config.Protocols = new(http.Protocols)
	l.srv.Config.Protocols.SetUnencryptedHTTP2(true)
	l.srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		select {
		case l.conns <- s:
		default:
		}
	}
	l.srv.Start()
	t.Cleanup(l.srv.Close)
	return l
}

// addr is the leader's address, as a raft address is.
func (l *testLeader) addr() string { return l.srv.Listener.Addr().String() }

func (l *testLeader) Get(ctx context.Context, _ *connect.Request[fencedv1.GetRequest]) (*connect.Response[fencedv1.GetResponse], error) {
	l.gets <- struct{}{}
	<-ctx.Done()
	return nil, connect.NewError(connect.CodeCanceled, ctx.Err())
}

func (l *testLeader) List(context.Context, *connect.Request[fencedv1.ListRequest]) (*connect.Response[fencedv1.ListResponse], error) {
	return connect.NewResponse(&fencedv1.ListResponse{}), nil
}

func (l *testLeader) Revoke(context.Context, *connect.Request[fencedv1.RevokeRequest]) (*connect.Response[fencedv1.RevokeResponse], error) {
	return connect.NewResponse(&fencedv1.RevokeResponse{}), nil
}
