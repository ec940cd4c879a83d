package admission

import (
	"bytes"
	"context"
	"io"
	"net/http"
)

// ReleaseSlot gives back the slot of ctx's call, if it holds one: the
// call is about to wait for something other than the server's cores.
func ReleaseSlot(ctx context.Context) {
	if c := callOf(ctx); c != nil {
		c.slot.Release()
		c.networkSlot.Release()
		c.place.Load().Leave()
	}
}

// CallLimits are what LimitCalls admits a call by.
type CallLimits struct {
	PerClient  *CallSlots // slots per client address
	PerNetwork *CallSlots // slots per client network
	Networks   Networks   // which network an address is in
	Gate       *FairGate  // the calls worked on at once, in turns by network
}

// CallRefusal says which share refused a call: that of the client address
// or of its network (Network set), and how many of its slots were in use.
type CallRefusal struct {
	Client  string // the address, or the network when Network is set
	Network bool
	Used    int
}

// LimitCalls refuses a unary call whose client address or network
// already has all of its slots in use, before anything else is done with
// it: refuse answers it and its body is not read (over HTTP/1.1 the
// connection is closed after the answer). A call it admits holds its
// slots until it ends or gives them back (ReleaseSlot). Calls without an
// address (WithCallerAddr did not run) and those stream reports take
// none.
func LimitCalls(h http.Handler, limits CallLimits, stream func(*http.Request) bool,
	refuse func(w http.ResponseWriter, r *http.Request, why CallRefusal)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := callOf(r.Context())
		if c == nil || c.addr == "" || stream(r) {
			h.ServeHTTP(w, r)
			return
		}
		network := limits.Networks.Of(c.addr)
		why := CallRefusal{Client: c.addr}
		ok, n := limits.PerClient.Take(c.addr, &c.slot)
		if ok {
			if ok, n = limits.PerNetwork.Take(network, &c.networkSlot); !ok {
				c.slot.Release()
				why = CallRefusal{Client: network, Network: true}
			}
		}
		if !ok {
			if r.ProtoMajor == 1 {
				// Else net/http reads the unread body after the answer, to reuse the connection.
				w.Header().Set("Connection", "close")
			}
			why.Used = n
			refuse(w, r, why)
			return
		}
		defer c.slot.Release()
		defer c.networkSlot.Release()
		h.ServeHTTP(w, r)
	})
}

// TakeTurns lets a unary call be worked on once it has arrived whole and
// has a place in the gate: it reads the call's body first (as the limits
// on r.Body allow; an error reading it is the body's error to whoever
// reads it next), then waits for a place, in its network's line, and
// holds it until the call ends or gives its slot back (ReleaseSlot). A
// client slow to send its body therefore holds no place while it sends,
// and a call whose client goes away while it waits ends without an
// answer. Calls without an address and those stream reports take no
// place.
func TakeTurns(h http.Handler, limits CallLimits, stream func(*http.Request) bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := callOf(r.Context())
		if c == nil || c.addr == "" || stream(r) {
			h.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(r.Body)
		r.Body = &readBody{Reader: bytes.NewReader(body), err: err}
		place, err := limits.Gate.Enter(r.Context(), limits.Networks.Of(c.addr))
		if err != nil {
			return // the client is gone: nobody to answer
		}
		c.place.Store(place)
		defer place.Leave()
		h.ServeHTTP(w, r)
	})
}

// readBody is a body read ahead: its bytes, then the error that ended
// the reading (io.EOF when it ended well).
type readBody struct {
	*bytes.Reader
	err error
}

func (b *readBody) Read(p []byte) (int, error) {
	n, err := b.Reader.Read(p)
	if err == io.EOF && b.err != nil {
		err = b.err
	}
	return n, err
}

func (b *readBody) Close() error { return nil }

// EnterCall admits one call that a stream of ctx's request carries (a
// Session's Acquire, Renew or Release) as LimitCalls and TakeTurns admit a
// unary call: it takes a slot of the caller's address and one of its
// network, then waits for a place in the gate, in its network's line. The
// call's context carries its own slots and place, which ReleaseSlot gives
// back early, and leave gives back, once. refused says which share was
// full (nothing is taken then); err is ctx's error when ctx ended while the
// call waited for its place. A request without an address takes nothing.
func (l CallLimits) EnterCall(ctx context.Context) (callCtx context.Context, leave func(), refused *CallRefusal, err error) {
	stream := callOf(ctx)
	if stream == nil || stream.addr == "" {
		return ctx, func() {}, nil, nil
	}
	c := &call{addr: stream.addr, auth: stream.auth, authed: stream.authed}
	network := l.Networks.Of(c.addr)
	ok, n := l.PerClient.Take(c.addr, &c.slot)
	if !ok {
		return nil, nil, &CallRefusal{Client: c.addr, Used: n}, nil
	}
	if ok, n = l.PerNetwork.Take(network, &c.networkSlot); !ok {
		c.slot.Release()
		return nil, nil, &CallRefusal{Client: network, Network: true, Used: n}, nil
	}
	place, err := l.Gate.Enter(ctx, network)
	if err != nil {
		c.slot.Release()
		c.networkSlot.Release()
		return nil, nil, nil, err
	}
	c.place.Store(place)
	return context.WithValue(ctx, callKey{}, c), func() {
		c.slot.Release()
		c.networkSlot.Release()
		place.Leave()
	}, nil, nil
}
