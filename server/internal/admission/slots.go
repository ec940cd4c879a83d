package admission

import (
	"context"
	"net/http"
)

// ReleaseSlot gives back the slot of ctx's call, if it holds one: the
// call is about to wait for something other than the server's cores.
func ReleaseSlot(ctx context.Context) {
	if c := callOf(ctx); c != nil {
		c.slot.Release()
	}
}

// LimitCalls refuses a unary call from a client address that already has
// all its slots in use, before anything else is done with it: refuse
// answers it, given the address and the slots it has in use, and its body
// is not read: over HTTP/1.1 the connection is closed after the answer.
// Calls without an address (WithCallerAddr did not run) and those stream
// reports take no slot.
func LimitCalls(h http.Handler, slots *CallSlots, stream func(*http.Request) bool,
	refuse func(w http.ResponseWriter, r *http.Request, addr string, used int)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := callOf(r.Context())
		if c == nil || c.addr == "" || stream(r) {
			h.ServeHTTP(w, r)
			return
		}
		addr := c.addr
		ok, n := slots.Take(addr, &c.slot)
		if !ok {
			if r.ProtoMajor == 1 {
				// Else net/http reads the unread body before answering.
				w.Header().Set("Connection", "close")
			}
			refuse(w, r, addr, n)
			return
		}
		defer c.slot.Release()
		h.ServeHTTP(w, r)
	})
}
