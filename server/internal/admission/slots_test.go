package admission

import (
	"net/http"
	"net/http/httptest"
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
	}), slots, func(r *http.Request) bool { return r.URL.Path == "/stream" },
		func(w http.ResponseWriter, r *http.Request, addr string, used int) {
			if addr != "192.0.2.7" {
				t.Errorf("refused address %q", addr)
			}
			refused = append(refused, used)
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
