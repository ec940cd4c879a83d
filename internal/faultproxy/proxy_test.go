package faultproxy

import (
	"bufio"
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fencedio/fenced/internal/testutil"
)

func newProxy(t *testing.T) *Proxy {
	t.Helper()
	p, err := Listen("127.0.0.1:0", testutil.EchoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

type client struct {
	t *testing.T
	c net.Conn
	r *bufio.Reader
}

func dialFrom(t *testing.T, p *Proxy, source string) *client {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second}
	if source != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(source)}
	}
	c, err := d.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &client{t: t, c: c, r: bufio.NewReader(c)}
}

// echo sends msg and waits up to within for it to come back.
func (c *client) echo(msg string, within time.Duration) error {
	c.c.SetDeadline(time.Now().Add(within))
	if _, err := c.c.Write([]byte(msg + "\n")); err != nil {
		return err
	}
	return c.read(msg, within)
}

func (c *client) read(msg string, within time.Duration) error {
	c.c.SetReadDeadline(time.Now().Add(within))
	line, err := c.r.ReadString('\n')
	if err != nil {
		return err
	}
	if got := strings.TrimSuffix(line, "\n"); got != msg {
		c.t.Fatalf("echo %q, got %q", msg, got)
	}
	return nil
}

func TestPartitionAndHeal(t *testing.T) {
	p := newProxy(t)
	c := dialFrom(t, p, "")
	if err := c.echo("before", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Partition()
	if err := c.echo("during", 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("echo through a partition: %v, want a timeout", err)
	}
	// A connection opened during the partition hangs too.
	late := dialFrom(t, p, "")
	if err := late.echo("late", 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("echo on a new connection through a partition: %v, want a timeout", err)
	}
	p.Heal()
	// What was sent during the partition arrives after it.
	if err := c.read("during", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := late.read("late", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := c.echo("after", 5*time.Second); err != nil {
		t.Fatal(err)
	}
}

// A partition of one source host leaves the others' connections alone.
func TestPartitionBySource(t *testing.T) {
	p := newProxy(t)
	a, b := dialFrom(t, p, "127.0.0.2"), dialFrom(t, p, "127.0.0.3")
	p.Partition("127.0.0.2")
	if err := a.echo("a", 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("echo from the partitioned host: %v, want a timeout", err)
	}
	if err := b.echo("b", 5*time.Second); err != nil {
		t.Fatalf("echo from another host: %v", err)
	}
	p.Heal()
	if err := a.read("a", 5*time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestDelay(t *testing.T) {
	p := newProxy(t)
	c := dialFrom(t, p, "")
	const d = 100 * time.Millisecond
	p.SetDelay(d)
	start := time.Now()
	if err := c.echo("slow", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	// One delay on the way in, one on the way back.
	if took := time.Since(start); took < 2*d {
		t.Errorf("echo took %v with a delay of %v each way", took, d)
	}
	p.SetDelay(0)
	if err := c.echo("fast", 5*time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestReset(t *testing.T) {
	p := newProxy(t)
	c := dialFrom(t, p, "")
	if err := c.echo("x", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Reset()
	c.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.r.ReadByte(); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read after a reset: %v, want the connection ended", err)
	}
	if err := dialFrom(t, p, "").echo("y", 5*time.Second); err != nil {
		t.Fatalf("a new connection after a reset: %v", err)
	}
}

// A reply delay holds back only what the target sends: the request arrives
// at once, its answer late.
func TestReplyDelay(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	arrived := make(chan time.Time, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			return
		}
		arrived <- time.Now()
		c.Write([]byte(line))
	}()
	p, err := Listen("127.0.0.1:0", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	const d = 200 * time.Millisecond
	p.SetReplyDelay(d)
	c := dialFrom(t, p, "")
	start := time.Now()
	if err := c.echo("late", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if in := (<-arrived).Sub(start); in >= d {
		t.Errorf("the request took %v to arrive with only replies delayed by %v", in, d)
	}
	if took < d {
		t.Errorf("the reply came after %v with a reply delay of %v", took, d)
	}
}
