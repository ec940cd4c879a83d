package netfault

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/fencedio/fenced/internal/testutil"
)

// dialFrom connects to addr from node i's loopback address.
func dialFrom(t *testing.T, i int, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(NodeIP(i))}, Timeout: time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Skipf("cannot dial from %s: %v", NodeIP(i), err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip reports whether c echoes a message within d.
func roundTrip(c net.Conn, d time.Duration) error {
	c.SetDeadline(time.Now().Add(d))
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write([]byte("ping")); err != nil {
		return err
	}
	buf := make([]byte, 4)
	_, err := io.ReadFull(c, buf)
	return err
}

// The proxy in front of node 0 tells its peers apart by their source
// address: a partition cuts node 1 (both ways) and not node 2; dropped
// links close connections and refuse new ones, black-holed ones swallow
// bytes, and healing closes the connections that lost bytes.
func TestLinkProxyPartitions(t *testing.T) {
	n := NewNetwork()
	for i := range 3 {
		n.AddNode(NodeIP(i), i)
	}
	p, err := NewLinkProxy(n, 0, testutil.EchoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c1, c2 := dialFrom(t, 1, p.Addr()), dialFrom(t, 2, p.Addr())
	for i, c := range []net.Conn{c1, c2} {
		if err := roundTrip(c, time.Second); err != nil {
			t.Fatalf("node %d before any fault: %v", i+1, err)
		}
	}

	n.Partition(LinkDrop, []int{0, 2}, []int{1})
	if err := roundTrip(c1, time.Second); err == nil {
		t.Error("node 1's connection still echoes across a dropped partition")
	}
	if err := roundTrip(dialFrom(t, 1, p.Addr()), time.Second); err == nil {
		t.Error("a new connection from node 1 echoes across a dropped partition")
	}
	if err := roundTrip(c2, time.Second); err != nil {
		t.Errorf("node 2, on node 0's side: %v", err)
	}
	n.Heal()
	if err := roundTrip(dialFrom(t, 1, p.Addr()), time.Second); err != nil {
		t.Errorf("node 1 after the heal: %v", err)
	}

	c1 = dialFrom(t, 1, p.Addr())
	if err := roundTrip(c1, time.Second); err != nil {
		t.Fatal(err)
	}
	n.Partition(LinkBlackHole, []int{0}, []int{1, 2})
	if err := roundTrip(c1, 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("black-holed link: %v, want a timeout with the connection open", err)
	}
	n.Heal()
	// The connection that lost bytes is closed by the heal.
	c1.SetReadDeadline(time.Now().Add(time.Second))
	if _, err := c1.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("after the heal, the black-holed connection: %v, want it closed", err)
	}

	n.SetDelay(2, 0, 200*time.Millisecond)
	start := time.Now()
	if err := roundTrip(c2, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Errorf("delayed link answered in %v, want at least 200ms", d)
	}
}
