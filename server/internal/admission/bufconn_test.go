package admission

import (
	"io"
	"net"
	"testing"
)

// A connection accepted through BufferedListener reads what was sent, in
// order, and its other methods are the connection's.
func TestBufferedListener(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := BufferedListener{Listener: inner}
	t.Cleanup(func() { ln.Close() })
	sent := make([]byte, 10<<10) // more than the buffer holds
	for i := range sent {
		sent[i] = byte(i)
	}
	go func() {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close()
		for _, part := range [][]byte{sent[:9], sent[9:109], sent[109:]} { // a frame header, a payload, the rest
			if _, err := c.Write(part); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(sent) {
		t.Fatalf("read %d bytes, not the %d sent", len(got), len(sent))
	}
	if c.RemoteAddr() == nil || c.LocalAddr().String() != inner.Addr().String() {
		t.Errorf("addresses %v -> %v", c.RemoteAddr(), c.LocalAddr())
	}
}
