package admission

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/fencedio/fenced/server/internal/security"
)

// LimitCalls gives each unary call from an address one of its slots for
// as long as it runs, refuses the next one through refuse (closing an
// HTTP/1.1 connection), and takes no slot for streams or callers without
// an address; ReleaseSlot gives a running call's slot back early.
func TestLimitCalls(t *testing.T) {
	slots := NewCallSlots(1)
	var refused []int
	inside := make(chan struct{})
	proceed := make(chan struct{})
	h := LimitCalls(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/hold":
			inside <- struct{}{}
			<-proceed
		case "/wait":
			ReleaseSlot(r.Context())
			inside <- struct{}{}
			<-proceed
		}
	}), CallLimits{PerClient: slots, PerNetwork: NewCallSlots(10), Networks: Networks{V4: 24, V6: 64}},
		func(r *http.Request) bool { return r.URL.Path == "/stream" },
		func(w http.ResponseWriter, r *http.Request, why CallRefusal) {
			if why.Client != "192.0.2.7" || why.Network {
				t.Errorf("refused %+v, want the address 192.0.2.7", why)
			}
			refused = append(refused, why.Used)
			w.WriteHeader(http.StatusTooManyRequests)
		})
	serve := func(path string, withAddr bool) *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", path, nil)
		r.RemoteAddr = "192.0.2.7:4242"
		w := httptest.NewRecorder()
		if withAddr {
			WithCallerAddr(h, false).ServeHTTP(w, r)
		} else {
			h.ServeHTTP(w, r)
		}
		return w
	}

	done := make(chan struct{})
	go func() { serve("/hold", true); close(done) }()
	<-inside
	if n := slots.InUse("192.0.2.7"); n != 1 {
		t.Fatalf("a running call holds %d slots, want 1", n)
	}
	w := serve("/get", true)
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Connection") != "close" || len(refused) != 1 || refused[0] != 1 {
		t.Fatalf("a call beyond the limit: %d, Connection %q, refusals %v; want 429, close, [1]",
			w.Code, w.Header().Get("Connection"), refused)
	}
	if w := serve("/stream", true); w.Code != http.StatusOK {
		t.Errorf("a stream was refused: %d", w.Code)
	}
	if w := serve("/get", false); w.Code != http.StatusOK {
		t.Errorf("a call without an address was refused: %d", w.Code)
	}
	proceed <- struct{}{}
	<-done
	if n := slots.InUse("192.0.2.7"); n != 0 {
		t.Fatalf("an ended call left %d slots taken", n)
	}

	done = make(chan struct{})
	go func() { serve("/wait", true); close(done) }()
	<-inside
	if n := slots.InUse("192.0.2.7"); n != 0 {
		t.Errorf("a call that gave its slot back still holds %d", n)
	}
	if w := serve("/get", true); w.Code != http.StatusOK {
		t.Errorf("a call while the other waits: %d", w.Code)
	}
	proceed <- struct{}{}
	<-done
}

// A network's calls are capped on top of its addresses': the call beyond
// the network's slots is refused naming the network, even from an address
// with slots to spare, and gives back the address's slot it took.
func TestLimitCallsPerNetwork(t *testing.T) {
	limits := CallLimits{PerClient: NewCallSlots(5), PerNetwork: NewCallSlots(2), Networks: Networks{V4: 24, V6: 64}}
	var refusals []CallRefusal
	inside := make(chan struct{})
	proceed := make(chan struct{})
	h := WithCallerAddr(LimitCalls(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inside <- struct{}{}
		<-proceed
	}), limits, func(*http.Request) bool { return false },
		func(w http.ResponseWriter, r *http.Request, why CallRefusal) {
			refusals = append(refusals, why)
			w.WriteHeader(http.StatusTooManyRequests)
		}), false)
	serve := func(ip string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", "/", nil)
		r.RemoteAddr = ip + ":4242"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	done := make(chan struct{}, 3)
	for _, ip := range []string{"192.0.2.7", "192.0.2.8"} {
		go func() { serve(ip); done <- struct{}{} }()
		<-inside
	}
	if w := serve("192.0.2.9"); w.Code != http.StatusTooManyRequests {
		t.Fatalf("a third call from the network: %d, want 429", w.Code)
	}
	want := CallRefusal{Client: "192.0.2.0/24", Network: true, Used: 2}
	if len(refusals) != 1 || refusals[0] != want {
		t.Fatalf("refusals %+v, want [%+v]", refusals, want)
	}
	if n := limits.PerClient.InUse("192.0.2.9"); n != 0 {
		t.Fatalf("a call refused by its network kept %d slots of its address", n)
	}
	go func() { serve("198.51.100.1"); done <- struct{}{} }() // another network
	<-inside
	for range 3 {
		proceed <- struct{}{}
		<-done
	}
	if n := limits.PerNetwork.InUse("192.0.2.0/24"); n != 0 {
		t.Fatalf("all ended: the network holds %d slots", n)
	}
}

// TakeTurns gives a call a place in the gate only once its body has
// arrived, passes the body on whole (and the error that ended it), and
// takes the place back when the call ends or gives its slot back.
func TestTakeTurns(t *testing.T) {
	limits := CallLimits{Networks: Networks{V4: 24, V6: 64}, Gate: NewFairGate(1, nil)}
	got := make(chan string, 1)
	inside := make(chan struct{})
	proceed := make(chan struct{})
	h := WithCallerAddr(TakeTurns(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		got <- fmt.Sprintf("%s %v", b, err)
		if r.URL.Path == "/wait" {
			ReleaseSlot(r.Context())
		}
		inside <- struct{}{}
		<-proceed
	}), limits, func(*http.Request) bool { return false }), false)
	serve := func(path string, body io.Reader) {
		r := httptest.NewRequest("POST", path, body)
		r.RemoteAddr = "192.0.2.7:4242"
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	pr, pw := io.Pipe()
	done := make(chan struct{}, 2)
	go func() { serve("/hold", pr); done <- struct{}{} }()
	pw.Write([]byte("par"))
	if r, _ := limits.Gate.Running(); r != 0 {
		t.Fatalf("a call whose body is still arriving holds %d places", r)
	}
	pw.CloseWithError(errors.New("cut"))
	if b := <-got; b != "par cut" {
		t.Fatalf("the handler read %q, want the bytes and the error that ended them", b)
	}
	<-inside
	if r, _ := limits.Gate.Running(); r != 1 {
		t.Fatalf("a call being worked on holds %d places, want 1", r)
	}
	proceed <- struct{}{}
	<-done
	go func() { serve("/wait", strings.NewReader("body")); done <- struct{}{} }()
	if b := <-got; b != "body <nil>" {
		t.Fatalf("the handler read %q", b)
	}
	<-inside
	if r, _ := limits.Gate.Running(); r != 0 {
		t.Fatalf("a call that gave its slot back holds %d places", r)
	}
	proceed <- struct{}{}
	<-done
}

// EnterCall gives each call a stream carries slots of its own, against
// the stream's address and network, and a place in the gate: a full
// address or network refuses the call and takes nothing; the call's
// context carries its caller and auth, and ReleaseSlot on it gives back
// only its own slots; a call whose context ends while it waits for a place
// gets the context's error and holds nothing.
func TestEnterCall(t *testing.T) {
	limits := CallLimits{PerClient: NewCallSlots(2), PerNetwork: NewCallSlots(2), Networks: Networks{V4: 24, V6: 64}, Gate: NewFairGate(2, nil)}
	stream := func(ip string) context.Context {
		r := httptest.NewRequest("POST", "/s", nil)
		r.RemoteAddr = ip + ":4242"
		var ctx context.Context
		WithCallerAddr(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
			ctx = WithAuth(r, security.AuthResult{}).Context()
		}), false).ServeHTTP(httptest.NewRecorder(), r)
		return ctx
	}
	a := stream("192.0.2.7")
	ctx1, leave1, why, err := limits.EnterCall(a)
	if why != nil || err != nil {
		t.Fatalf("first call: refused %+v, %v", why, err)
	}
	if ClientAddr(ctx1) != "192.0.2.7" {
		t.Errorf("the call's address %q, want the stream's", ClientAddr(ctx1))
	}
	if _, ok := AuthOf(ctx1); !ok {
		t.Error("the call lost what authentication found for its stream")
	}
	ctx2, leave2, why, err := limits.EnterCall(a)
	if why != nil || err != nil {
		t.Fatalf("second call: refused %+v, %v", why, err)
	}
	if _, _, why, _ := limits.EnterCall(a); why == nil || why.Network || why.Used != 2 {
		t.Fatalf("third call of a full address: refused %+v, want the address with 2 in use", why)
	}
	// Waiting in line gives back the call's slots, not the stream's
	// other call's.
	ReleaseSlot(ctx2)
	if n := limits.PerClient.InUse("192.0.2.7"); n != 1 {
		t.Fatalf("after one call gave its slot back, %d in use, want 1", n)
	}
	if r, w := limits.Gate.Running(); r != 1 || w != 0 {
		t.Fatalf("gate: %d running, %d waiting; want 1, 0", r, w)
	}
	// The network has 2 slots: .8 takes the second, and its next call is
	// refused as the network's.
	b := stream("192.0.2.8")
	_, leave3, why, err := limits.EnterCall(b)
	if why != nil || err != nil {
		t.Fatalf("call of another address: refused %+v, %v", why, err)
	}
	ctx4, leave4, why, err := limits.EnterCall(b)
	if why == nil || !why.Network || why.Client != "192.0.2.0/24" || ctx4 != nil || leave4 != nil || err != nil {
		t.Fatalf("call beyond the network's share: refused %+v, %v", why, err)
	}
	if n := limits.PerClient.InUse("192.0.2.8"); n != 1 {
		t.Fatalf("a refused call holds a slot of its address: %d in use, want 1", n)
	}
	// The gate is full (two places): a call waits, and ends with its
	// context, holding nothing.
	leave2()
	c := stream("198.51.100.1")
	cctx, cancel := context.WithCancel(c)
	done := make(chan error, 1)
	go func() {
		_, _, _, err := limits.EnterCall(cctx)
		done <- err
	}()
	for {
		if _, w := limits.Gate.Running(); w == 1 {
			break
		}
		runtime.Gosched()
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("a call whose context ended in line: %v, want canceled", err)
	}
	if n := limits.PerClient.InUse("198.51.100.1"); n != 0 {
		t.Fatalf("a call that never got a place holds %d slots", n)
	}
	leave1()
	leave1() // twice: given back once
	leave3()
	if r, w := limits.Gate.Running(); r != 0 || w != 0 || limits.PerClient.InUse("192.0.2.7") != 0 || limits.PerNetwork.InUse("192.0.2.0/24") != 0 {
		t.Fatalf("after every call left: gate %d running, %d waiting; slots %d, network %d", r, w,
			limits.PerClient.InUse("192.0.2.7"), limits.PerNetwork.InUse("192.0.2.0/24"))
	}
	// Without an address (the Go API) nothing is taken.
	bare, leave, why, err := limits.EnterCall(context.Background())
	if bare == nil || why != nil || err != nil {
		t.Fatalf("a call without an address: %v %+v %v", bare, why, err)
	}
	leave()
}
