package fenceconnect_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fenceconnect"
	"github.com/fencedio/fenced/internal/fencedtest"
)

// exampleLease stands in for *client.Lease.
type exampleLease struct {
	key   string
	token uint64
}

func (l *exampleLease) Key() string        { return l.key }
func (l *exampleLease) Token() uint64      { return l.token }
func (l *exampleLease) MarkLost(err error) { fmt.Println("lease", l.token, "lost:", err) }

func Example() {
	const put = "/acme.store.v1.StoreService/Put"
	var value string
	guard := fence.NewMemory(fence.MemoryConfig{})
	mux := http.NewServeMux()
	mux.Handle(put, connect.NewUnaryHandler(put,
		func(_ context.Context, req *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
			value = req.Msg.GetValue() // runs only for a current token, one writer at a time
			return connect.NewResponse(wrapperspb.String("stored")), nil
		},
		connect.WithInterceptors(fenceconnect.NewInterceptor(guard, fenceconnect.InterceptorConfig{})),
	))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	write := func(lease *exampleLease, v string) {
		client := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](srv.Client(), srv.URL+put,
			connect.WithInterceptors(fenceconnect.NewClientInterceptor(lease)))
		_, err := client.CallUnary(context.Background(), connect.NewRequest(wrapperspb.String(v)))
		if err != nil {
			stale, _ := fenceconnect.StaleFromError(err)
			fmt.Printf("token %d: %v; highest %d\n", lease.token, connect.CodeOf(err), stale.Highest)
			return
		}
		fmt.Printf("token %d: ok\n", lease.token)
	}
	write(&exampleLease{key: "orders/7", token: 42}, "from B")
	write(&exampleLease{key: "orders/7", token: 41}, "from A, after a pause")
	fmt.Println("stored value:", value)
	// Output:
	// token 42: ok
	// lease 41 lost: stale fencing token for scope "orders/7": presented 41, highest accepted 42
	// token 41: failed_precondition; highest 42
	// stored value: from B
}

// With a real lease: the service's stale answer to A's late call ends A's
// lease context, so whatever A still runs under it stops.
func ExampleNewClientInterceptor_lease() {
	// An in-process fenced node; in production, Endpoint names yours.
	t := &fencedtest.ExampleTB{}
	defer t.Close()
	fenced := fencedtest.Start(t)

	ctx := context.Background()
	newClient := func(owner string) *client.Client {
		c, err := client.New(client.Config{Endpoint: fenced.URL, Owner: owner, TTL: 30 * time.Second})
		if err != nil {
			panic(err)
		}
		return c
	}
	a, b, operator := newClient("A"), newClient("B"), newClient("operator")

	// The service: stores the value of each call whose token is current.
	const put = "/acme.store.v1.StoreService/Put"
	var value string
	mux := http.NewServeMux()
	mux.Handle(put, connect.NewUnaryHandler(put,
		func(_ context.Context, req *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
			value = req.Msg.GetValue()
			return connect.NewResponse(wrapperspb.String("stored")), nil
		},
		connect.WithInterceptors(fenceconnect.NewInterceptor(fence.NewMemory(fence.MemoryConfig{}), fenceconnect.InterceptorConfig{})),
	))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	// Calls carry the lease's key and token, and run under its context.
	write := func(l *client.Lease, v string) string {
		c := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](srv.Client(), srv.URL+put,
			connect.WithInterceptors(fenceconnect.NewClientInterceptor(l)))
		if _, err := c.CallUnary(l.Context(), connect.NewRequest(wrapperspb.String(v))); err != nil {
			return connect.CodeOf(err).String()
		}
		return "ok"
	}

	leaseA, err := a.Acquire(ctx, "orders/7")
	if err != nil {
		panic(err)
	}
	fmt.Println("A writes with its token:", write(leaseA, "paid by A"))

	// The lease ends on the server without A noticing, as when it expires
	// while A is paused. Releasing it by its ID stands in for the expiry; A's
	// next renewal, seconds away, would be the first to find out.
	if err := operator.Release(ctx, leaseA.Key(), leaseA.ID()); err != nil {
		panic(err)
	}
	leaseB, err := b.Acquire(ctx, "orders/7")
	if err != nil {
		panic(err)
	}
	defer leaseB.Release(ctx)
	fmt.Println("B's token is higher:", leaseB.Token() > leaseA.Token())
	fmt.Println("B writes with its token:", write(leaseB, "shipped by B"))

	// A, its context still live, calls late; the stale answer makes the
	// interceptor call leaseA.MarkLost.
	fmt.Println("A's late write:", write(leaseA, "cancelled by A"))
	<-leaseA.Done()
	cause := context.Cause(leaseA.Context())
	fmt.Println("A's lease lost:", errors.Is(cause, client.ErrLost))
	fmt.Println("because its token is stale:", errors.Is(cause, fence.ErrStaleToken))
	fmt.Println("stored value:", value)
	// Output:
	// A writes with its token: ok
	// B's token is higher: true
	// B writes with its token: ok
	// A's late write: failed_precondition
	// A's lease lost: true
	// because its token is stale: true
	// stored value: shipped by B
}
