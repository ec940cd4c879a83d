package fencehttp_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"time"

	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencehttp"
	"github.com/fencedio/fenced/internal/fencedtest"
)

func ExampleMiddleware() {
	var value string
	store := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		value = string(b) // runs only for a current token, one writer at a time
	})
	srv := httptest.NewServer(fencehttp.Middleware(fence.NewMemory(fence.MemoryConfig{}), fencehttp.Config{})(store))
	defer srv.Close()

	put := func(token uint64, body string) *http.Response {
		req, _ := http.NewRequest(http.MethodPut, srv.URL+"/orders/7", strings.NewReader(body))
		req.Header.Set(fencehttp.HeaderScope, "orders/7")
		req.Header.Set(fencehttp.HeaderToken, strconv.FormatUint(token, 10))
		resp, err := srv.Client().Do(req)
		if err != nil {
			panic(err)
		}
		return resp
	}

	resp := put(42, "from B")
	resp.Body.Close()
	fmt.Println("token 42:", resp.Status)

	resp = put(41, "from A, after a pause")
	defer resp.Body.Close()
	fmt.Println("token 41:", resp.Status, resp.Header.Get("Content-Type"))
	p, err := fencehttp.DecodeProblem(resp.Body)
	if err != nil {
		panic(err)
	}
	fmt.Println("highestToken:", p.HighestToken)
	fmt.Println("stored value:", value)
	// Output:
	// token 42: 200 OK
	// token 41: 409 Conflict application/problem+json
	// highestToken: 42
	// stored value: from B
}

// exampleLease stands in for *client.Lease.
type exampleLease struct {
	key   string
	token uint64
}

func (l *exampleLease) Key() string        { return l.key }
func (l *exampleLease) Token() uint64      { return l.token }
func (l *exampleLease) MarkLost(err error) { fmt.Println("lease", l.token, "lost:", err) }

func ExampleTransport() {
	srv := httptest.NewServer(fencehttp.Middleware(fence.NewMemory(fence.MemoryConfig{}), fencehttp.Config{})(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	defer srv.Close()

	write := func(lease *exampleLease) {
		client := &http.Client{Transport: fencehttp.NewTransport(lease, srv.Client().Transport)}
		resp, err := client.Post(srv.URL, "text/plain", strings.NewReader("v"))
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		fmt.Println("token", lease.token, "->", resp.Status)
	}
	write(&exampleLease{key: "orders/7", token: 42})
	write(&exampleLease{key: "orders/7", token: 41})
	// Output:
	// token 42 -> 200 OK
	// lease 41 lost: stale fencing token for scope "orders/7": presented 41, highest accepted 42
	// token 41 -> 409 Conflict
}

// With a real lease: the resource's stale answer to A's late write ends A's
// lease context, so whatever A still runs under it stops.
func ExampleTransport_lease() {
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

	// The resource: stores the body of each write whose token is current.
	var value string
	resource := httptest.NewServer(fencehttp.Middleware(fence.NewMemory(fence.MemoryConfig{}), fencehttp.Config{})(http.HandlerFunc(
		func(w http.ResponseWriter, r *http.Request) {
			body, err := io.ReadAll(r.Body)
			if err != nil {
				w.WriteHeader(http.StatusBadRequest)
				return
			}
			value = string(body)
		})))
	defer resource.Close()

	// Requests carry the lease's key and token, and its context.
	write := func(l *client.Lease, body string) string {
		hc := &http.Client{Transport: fencehttp.NewTransport(l, resource.Client().Transport)}
		req, err := http.NewRequestWithContext(l.Context(), http.MethodPut, resource.URL+"/orders/7", strings.NewReader(body))
		if err != nil {
			panic(err)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return err.Error()
		}
		resp.Body.Close()
		return resp.Status
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

	// A, its context still live, writes late; the 409 makes the transport
	// call leaseA.MarkLost.
	fmt.Println("A's late write:", write(leaseA, "cancelled by A"))
	<-leaseA.Done()
	cause := context.Cause(leaseA.Context())
	fmt.Println("A's lease lost:", errors.Is(cause, client.ErrLost))
	fmt.Println("because its token is stale:", errors.Is(cause, fence.ErrStaleToken))
	fmt.Println("stored value:", value)
	// Output:
	// A writes with its token: 200 OK
	// B's token is higher: true
	// B writes with its token: 200 OK
	// A's late write: 409 Conflict
	// A's lease lost: true
	// because its token is stale: true
	// stored value: shipped by B
}
