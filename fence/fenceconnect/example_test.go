package fenceconnect_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fenceconnect"
)

// exampleLease stands in for *client.Lease.
type exampleLease struct {
	key   string
	token uint64
}

func (l *exampleLease) Key() string    { return l.key }
func (l *exampleLease) Token() uint64  { return l.token }
func (l *exampleLease) Lost(err error) { fmt.Println("lease", l.token, "lost:", err) }

func Example() {
	const put = "/acme.store.v1.StoreService/Put"
	var value string
	guard := fence.NewMemory()
	mux := http.NewServeMux()
	mux.Handle(put, connect.NewUnaryHandler(put,
		func(_ context.Context, req *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
			value = req.Msg.GetValue() // runs only for a current token, one writer at a time
			return connect.NewResponse(wrapperspb.String("stored")), nil
		},
		connect.WithInterceptors(fenceconnect.NewInterceptor(guard)),
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
