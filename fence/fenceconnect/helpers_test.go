package fenceconnect_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fenceconnect"
	"github.com/fencedio/fenced/fence/fencehttp"
)

const (
	putProcedure    = "/fence.test.v1.StoreService/Put"
	getProcedure    = "/fence.test.v1.StoreService/Get"
	streamProcedure = "/fence.test.v1.StoreService/PutStream"
)

// exemptGet fences every procedure but Get.
func exemptGet(procedure string) bool { return procedure != getProcedure }

// store is the protected resource. It counts the calls that reach its
// handlers per scope and echoes the fencing headers it received.
type store struct {
	mu      sync.Mutex
	applied map[string]int

	// streamGate, when set, is closed by the test to let PutStream finish.
	streamGate chan struct{}
	inStream   atomic.Bool
	// events records the order in which handlers start and end.
	events chan string
}

func (s *store) apply(h http.Header) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.applied[h.Get(fencehttp.HeaderScope)]++
}

func (s *store) count(scope string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.applied[scope]
}

func (s *store) event(e string) {
	if s.events != nil {
		s.events <- e
	}
}

func echo(h http.Header) *wrapperspb.StringValue {
	return wrapperspb.String(fmt.Sprintf("scope=%s token=%s", h.Get(fencehttp.HeaderScope), strings.Join(h.Values(fencehttp.HeaderToken), ",")))
}

var errHandler = errors.New("handler refused the value")

func (s *store) put(ctx context.Context, req *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
	switch req.Msg.GetValue() {
	case "fail":
		return nil, connect.NewError(connect.CodeAborted, errHandler)
	case "precondition":
		return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("version mismatch"))
	}
	s.event("put")
	if s.inStream.Load() {
		s.event("put during stream")
	}
	s.apply(req.Header())
	return connect.NewResponse(echo(req.Header())), nil
}

func (s *store) get(ctx context.Context, req *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
	return connect.NewResponse(echo(req.Header())), nil
}

func (s *store) putStream(ctx context.Context, req *connect.Request[wrapperspb.StringValue], stream *connect.ServerStream[wrapperspb.StringValue]) error {
	s.inStream.Store(true)
	defer s.inStream.Store(false)
	s.event("stream start")
	defer s.event("stream end")
	s.apply(req.Header())
	for range 3 {
		if err := stream.Send(echo(req.Header())); err != nil {
			return err
		}
		if s.streamGate != nil {
			<-s.streamGate
		}
	}
	if req.Msg.GetValue() == "fail" {
		return connect.NewError(connect.CodeAborted, errHandler)
	}
	return nil
}

// env is a running server for one protocol and the clients that talk to it.
type env struct {
	guard     fence.Guard
	store     *store
	httpc     *http.Client
	url       string
	protocol  []connect.ClientOption
	requests  atomic.Int32 // HTTP requests that reached the server
	httpMajor atomic.Int32 // HTTP major version of the last request
}

type protocol struct {
	name string
	opt  connect.ClientOption // nil for the Connect protocol
	tls  bool                 // gRPC needs HTTP/2, which httptest offers over TLS
}

var protocols = []protocol{
	{name: "connect"},
	{name: "grpc", opt: connect.WithGRPC(), tls: true},
	{name: "grpcweb", opt: connect.WithGRPCWeb()},
}

func newEnv(t *testing.T, p protocol, g fence.Guard, s *store) *env {
	t.Helper()
	if s == nil {
		s = &store{}
	}
	s.applied = map[string]int{}
	e := &env{guard: g, store: s}
	icpt := connect.WithInterceptors(fenceconnect.NewInterceptor(g, fenceconnect.InterceptorConfig{Procedures: exemptGet}))
	mux := http.NewServeMux()
	mux.Handle(putProcedure, connect.NewUnaryHandler(putProcedure, s.put, icpt))
	mux.Handle(getProcedure, connect.NewUnaryHandler(getProcedure, s.get, icpt))
	mux.Handle(streamProcedure, connect.NewServerStreamHandler(streamProcedure, s.putStream, icpt))
	counted := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.requests.Add(1)
		e.httpMajor.Store(int32(r.ProtoMajor))
		mux.ServeHTTP(w, r)
	})
	srv := httptest.NewUnstartedServer(counted)
	if p.tls {
		srv.EnableHTTP2 = true
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	e.httpc = srv.Client()
	e.url = srv.URL
	if p.opt != nil {
		e.protocol = []connect.ClientOption{p.opt}
	}
	return e
}

func (e *env) client(procedure string, opts ...connect.ClientOption) *connect.Client[wrapperspb.StringValue, wrapperspb.StringValue] {
	return connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](e.httpc, e.url+procedure, append(opts, e.protocol...)...)
}

// call makes a unary call with the given fencing headers; an empty value is
// left out.
func (e *env) call(ctx context.Context, procedure, scope, token, value string) (*connect.Response[wrapperspb.StringValue], error) {
	req := connect.NewRequest(wrapperspb.String(value))
	if scope != "" {
		req.Header().Set(fencehttp.HeaderScope, scope)
	}
	if token != "" {
		req.Header().Set(fencehttp.HeaderToken, token)
	}
	return e.client(procedure).CallUnary(ctx, req)
}

func seed(t *testing.T, g fence.Guard, scope string, token uint64) {
	t.Helper()
	if err := g.Do(t.Context(), scope, token, func(context.Context) error { return nil }); err != nil {
		t.Fatalf("seed %q with %d: %v", scope, token, err)
	}
}

func highest(t *testing.T, g fence.Guard, scope string) uint64 {
	t.Helper()
	h, err := g.Highest(t.Context(), scope)
	if err != nil {
		t.Fatalf("Highest(%q): %v", scope, err)
	}
	return h
}

// fakeLease records what the client interceptor tells it.
type fakeLease struct {
	key   string
	token uint64

	mu   sync.Mutex
	lost []error
}

var _ fenceconnect.Lease = (*fakeLease)(nil)

func (l *fakeLease) Key() string   { return l.key }
func (l *fakeLease) Token() uint64 { return l.token }
func (l *fakeLease) MarkLost(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lost = append(l.lost, err)
}

func (l *fakeLease) lostErrs() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]error(nil), l.lost...)
}

// hookGuard wraps a guard to inject failures around the real decision.
type hookGuard struct {
	fence.Guard
	before  error         // returned without deciding
	after   error         // returned after a successful Do
	entered chan struct{} // receives once per Do call, if set
}

func (g *hookGuard) Do(ctx context.Context, scope string, token uint64, apply func(context.Context) error) error {
	if g.entered != nil {
		g.entered <- struct{}{}
	}
	if g.before != nil {
		return g.before
	}
	err := g.Guard.Do(ctx, scope, token, apply)
	if err == nil && g.after != nil {
		return g.after
	}
	return err
}
