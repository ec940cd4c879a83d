package admission

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
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
