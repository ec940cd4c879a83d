package fencehttp_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencehttp"
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
	srv := httptest.NewServer(fencehttp.Middleware(fence.NewMemory())(store))
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

func (l *exampleLease) Key() string    { return l.key }
func (l *exampleLease) Token() uint64  { return l.token }
func (l *exampleLease) Lost(err error) { fmt.Println("lease", l.token, "lost:", err) }

func ExampleTransport() {
	srv := httptest.NewServer(fencehttp.Middleware(fence.NewMemory())(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
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
