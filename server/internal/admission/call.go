package admission

import (
	"context"
	"net/http"
	"sync/atomic"

	"github.com/fencedio/fenced/server/internal/security"
)

// call is what the API's middleware learns of one request, carried in
// its context as one value that each layer fills in: one allocation and
// one copy of the request for all of them, not one per layer.
type call struct {
	addr string // WithCallerAddr
	slot Slot   // LimitCalls
	// networkSlot and place are LimitCalls' too: the network's slot and
	// the gate's place (atomic: ReleaseSlot may run on another goroutine).
	networkSlot Slot
	place       atomic.Pointer[Place]
	auth        security.AuthResult // WithAuth, when authed is set
	authed      bool
}

type callKey struct{}

// callOf is what is known of ctx's caller; nil when the call did not come over HTTP.
func callOf(ctx context.Context) *call {
	c, _ := ctx.Value(callKey{}).(*call)
	return c
}

// WithCallerAddr puts the caller's address (CallerAddr) in the
// request's context.
func WithCallerAddr(next http.Handler, peer bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		addr := CallerAddr(r, peer)
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callKey{}, &call{addr: addr})))
	})
}

// ClientAddr is the address of ctx's caller; "" when the call did not come
// over HTTP.
func ClientAddr(ctx context.Context) string {
	if c := callOf(ctx); c != nil {
		return c.addr
	}
	return ""
}

// ForwardClient names ctx's caller on the headers of a forwarded call.
func ForwardClient(ctx context.Context, h http.Header) {
	if addr := ClientAddr(ctx); addr != "" {
		h.Set(ForwardedClientHeader, addr)
	}
}

// WithAuth records what authentication found for r in r's context, for
// AuthOf: in the request's call if it has one, else in a new one.
func WithAuth(r *http.Request, res security.AuthResult) *http.Request {
	if c := callOf(r.Context()); c != nil {
		c.auth, c.authed = res, true
		return r
	}
	c := &call{auth: res, authed: true}
	return r.WithContext(context.WithValue(r.Context(), callKey{}, c))
}

// AuthOf is what authentication found for ctx's request, if it ran.
func AuthOf(ctx context.Context) (security.AuthResult, bool) {
	if c := callOf(ctx); c != nil && c.authed {
		return c.auth, true
	}
	return security.AuthResult{}, false
}
