package streamwrite

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"
)

// A client that never reads: Send writes until its connection holds more
// than the bound unacknowledged, then answers ErrBehind without writing,
// from then on; exceeded is called once; a last message written after it
// does not block, and the client finds it last when it reads.
func TestUnackedStopsAClientThatDoesNotRead(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the bound needs Linux")
	}
	const bound = 16 << 10
	done := make(chan string, 1)
	srv := &http.Server{ConnContext: ConnContext, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		exceeded := 0
		u := NewUnacked(r.Context(), bound, func() { exceeded++ })
		if u == nil || u.MaxWrite() != bound/2 {
			done <- fmt.Sprintf("NewUnacked(%d) = %v, want a bound with MaxWrite %d", bound, u, bound/2)
			return
		}
		rc := http.NewResponseController(w)
		rc.SetWriteDeadline(time.Now().Add(10 * time.Second)) // a write that blocks fails the test
		chunk := strings.Repeat("x", 1000) + "\n"
		written := 0
		var err error
		for err == nil {
			err = u.Send(func() error {
				if _, err := io.WriteString(w, chunk); err != nil {
					return err
				}
				written += len(chunk)
				return rc.Flush()
			})
		}
		called := false
		again := u.Send(func() error { called = true; return nil })
		switch {
		case !errors.Is(err, ErrBehind):
			done <- fmt.Sprintf("after %d bytes, Send: %v, want ErrBehind", written, err)
		case !errors.Is(again, ErrBehind) || called || exceeded != 1:
			done <- fmt.Sprintf("Send after ErrBehind: %v (write called: %v), exceeded called %d times; want ErrBehind, no write, once", again, called, exceeded)
		default:
			rc.SetWriteDeadline(time.Now().Add(time.Second))
			if _, err := io.WriteString(w, "last\n"); err != nil {
				done <- fmt.Sprintf("the last message: %v", err)
			} else if err := rc.Flush(); err != nil {
				done <- fmt.Sprintf("the last message: %v", err)
			} else {
				t.Logf("cut after %d bytes written", written)
				done <- ""
			}
		}
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	if msg := <-done; msg != "" {
		t.Fatal(msg)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSuffix(string(body), "\n"), "\n"); lines[len(lines)-1] != "last" {
		t.Errorf("the client read %d lines, the last %.20q; want \"last\"", len(lines), lines[len(lines)-1])
	}
}

// Without a connection in the context, or with no bound, there is no
// Unacked, and a nil one just writes.
func TestNoUnacked(t *testing.T) {
	ctx := ConnContext(context.Background(), nil)
	if u := NewUnacked(context.Background(), 1<<10, nil); u != nil {
		t.Error("NewUnacked without a connection returned a bound")
	}
	if u := NewUnacked(ctx, 0, nil); u != nil {
		t.Error("NewUnacked(0) returned a bound")
	}
	var u *Unacked
	wrote := false
	if err := u.Send(func() error { wrote = true; return nil }); err != nil || !wrote || u.MaxWrite() != 0 {
		t.Errorf("nil Unacked: Send %v, wrote %v, MaxWrite %d; want nil, true, 0", err, wrote, u.MaxWrite())
	}
}
