package admission

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/fencedio/fenced/server/internal/security"
)

// A request carries one call through the middleware: the caller's
// address, then what authentication found, in the same context value;
// its address is named on forwarded calls.
func TestCallCarriesAddressAndAuth(t *testing.T) {
	alice := security.AuthResult{Principal: security.Principal{Name: "alice", Method: "token"}}
	var served bool
	h := WithCallerAddr(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		if got := ClientAddr(ctx); got != "192.0.2.7" {
			t.Errorf("ClientAddr = %q, want 192.0.2.7", got)
		}
		if _, ok := AuthOf(ctx); ok {
			t.Error("AuthOf reports a result before authentication ran")
		}
		if r2 := WithAuth(r, alice); r2 != r {
			t.Error("WithAuth copied a request that already carries a call")
		}
		if res, ok := AuthOf(ctx); !ok || res.Principal.Name != "alice" || res.Err != nil {
			t.Errorf("AuthOf = %+v, %v; want alice", res, ok)
		}
		h := http.Header{}
		ForwardClient(ctx, h)
		if got := h.Get(ForwardedClientHeader); got != "192.0.2.7" {
			t.Errorf("forwarded client header %q, want 192.0.2.7", got)
		}
		served = true
	}), false)
	r := httptest.NewRequest("POST", "/", nil)
	r.RemoteAddr = "192.0.2.7:4242"
	h.ServeHTTP(httptest.NewRecorder(), r)
	if !served {
		t.Fatal("not served")
	}
}

// A request that did not come through WithCallerAddr has no address, and
// authentication still records its result.
func TestCallWithoutAddress(t *testing.T) {
	ctx := context.Background()
	if got := ClientAddr(ctx); got != "" {
		t.Errorf("ClientAddr of a bare context = %q", got)
	}
	h := http.Header{}
	ForwardClient(ctx, h)
	if len(h) != 0 {
		t.Errorf("headers %v for a caller without an address", h)
	}
	ReleaseSlot(ctx) // nothing to give back
	failed := security.AuthResult{Err: errors.New("bad token")}
	r := WithAuth(httptest.NewRequest("GET", "/", nil), failed)
	if res, ok := AuthOf(r.Context()); !ok || res.Err == nil {
		t.Errorf("AuthOf = %+v, %v; want the failure", res, ok)
	}
	if got := ClientAddr(r.Context()); got != "" {
		t.Errorf("ClientAddr = %q after WithAuth alone", got)
	}
}
