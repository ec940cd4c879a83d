package fenceredis_test

import (
	"bytes"
	"net"
	"sync"
	"testing"
)

// faultProxy is a loopback TCP proxy in front of Redis that loses replies on
// demand: it can drop the reply to the next script call (closing the
// client's connection instead of forwarding it, after the script has run),
// and it can cut every open connection at once. go-redis sees a broken
// connection in both cases and, by default, re-sends the command.
type faultProxy struct {
	t      testing.TB
	ln     net.Listener
	target string

	mu     sync.Mutex
	conns  map[*proxyConn]struct{}
	drop   func() // armed: run, then drop the next script reply
	closed bool
	wg     sync.WaitGroup
}

type proxyConn struct {
	client, server net.Conn
	// dropReply is set when this connection carries the script call whose
	// reply is to be dropped; onDrop runs before the connection is cut.
	mu        sync.Mutex
	dropReply bool
	onDrop    func()
}

func newFaultProxy(t testing.TB, target string) *faultProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy listen: %v", err)
	}
	p := &faultProxy{t: t, ln: ln, target: target, conns: make(map[*proxyConn]struct{})}
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

func (p *faultProxy) Addr() string { return p.ln.Addr().String() }

// dropNextScriptReply makes the proxy lose the reply to the next EVAL or
// EVALSHA it forwards. Redis runs the script; then before is called, and the
// client's connection is closed instead of receiving the reply.
func (p *faultProxy) dropNextScriptReply(before func()) {
	p.mu.Lock()
	p.drop = before
	p.mu.Unlock()
}

// armed reports whether a drop is still pending.
func (p *faultProxy) armed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.drop != nil
}

// killAll closes every open connection, both sides, and reports how many.
func (p *faultProxy) killAll() int {
	p.mu.Lock()
	conns := make([]*proxyConn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		c.client.Close()
		c.server.Close()
	}
	return len(conns)
}

func (p *faultProxy) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.ln.Close()
	p.killAll()
	p.wg.Wait()
}

func (p *faultProxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			client.Close()
			continue
		}
		c := &proxyConn{client: client, server: server}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			client.Close()
			server.Close()
			return
		}
		p.conns[c] = struct{}{}
		p.mu.Unlock()
		p.wg.Go(func() { p.upstream(c) })
		p.wg.Go(func() { p.downstream(c) })
	}
}

func (p *faultProxy) forget(c *proxyConn) {
	c.client.Close()
	c.server.Close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

var (
	evalsha = []byte("\r\nevalsha\r\n")
	eval    = []byte("\r\neval\r\n")
)

// upstream copies client -> server, marking the connection whose script
// call is to lose its reply.
func (p *faultProxy) upstream(c *proxyConn) {
	defer p.forget(c)
	buf := make([]byte, 64<<10)
	for {
		n, err := c.client.Read(buf)
		if n > 0 {
			chunk := bytes.ToLower(buf[:n])
			if bytes.Contains(chunk, evalsha) || bytes.Contains(chunk, eval) {
				p.mu.Lock()
				if p.drop != nil {
					c.mu.Lock()
					c.dropReply, c.onDrop = true, p.drop
					c.mu.Unlock()
					p.drop = nil
				}
				p.mu.Unlock()
			}
			if _, werr := c.server.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// downstream copies server -> client, except a reply marked to be dropped.
func (p *faultProxy) downstream(c *proxyConn) {
	defer p.forget(c)
	buf := make([]byte, 64<<10)
	for {
		n, err := c.server.Read(buf)
		if n > 0 {
			c.mu.Lock()
			drop, before := c.dropReply, c.onDrop
			c.mu.Unlock()
			if drop {
				if before != nil {
					before()
				}
				return // forget closes both sides: the reply is lost
			}
			if _, werr := c.client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
