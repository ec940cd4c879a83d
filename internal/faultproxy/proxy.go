// Package faultproxy is a TCP proxy for tests that injects the network
// faults cluster tests need: black holes (a partition: nothing is
// forwarded, connections stay open and hang, as they do when packets are
// dropped), delays, and resets of every open connection.
//
// A proxy stands in front of one listener. Faults apply to all traffic or
// to traffic of connections from given source hosts: on one machine, nodes
// whose peer addresses are 127.0.0.2, 127.0.0.3, ... and dial from them can
// be cut apart link by link (node A from node B, but not C from B).
//
// A black hole stops forwarding in both directions of the affected
// connections; bytes read before it began are held and delivered after
// Heal, as TCP would retransmit them. It is not a packet-level fault:
// there is no loss within a connection, only silence.
package faultproxy

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// Proxy forwards connections accepted on its address to a target address.
type Proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every change of the faults
	all     bool          // black-hole every connection
	hosts   map[string]bool
	delay   time.Duration
	replies time.Duration // extra delay of what the target sends back
	conns   map[*conn]struct{}
	closed  bool
	wg      sync.WaitGroup
}

type conn struct {
	host          string // source host of the client side
	client, agent net.Conn
}

// ErrClosed is returned by calls on a closed proxy.
var ErrClosed = errors.New("faultproxy: closed")

// Listen starts a proxy on addr (host:port, port 0 for any) forwarding to
// target.
func Listen(addr, target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, changed: make(chan struct{}), hosts: map[string]bool{}, conns: map[*conn]struct{}{}}
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

// Addr is the address the proxy listens on.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Partition black-holes the connections from the given source hosts, open
// and new; with no hosts, every connection.
func (p *Proxy) Partition(hosts ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(hosts) == 0 {
		p.all = true
	}
	for _, h := range hosts {
		p.hosts[h] = true
	}
	p.changedLocked()
}

// Heal ends every partition; held bytes flow again.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.all = false
	clear(p.hosts)
	p.changedLocked()
}

// SetDelay delays every chunk forwarded from now on by d (0: none).
func (p *Proxy) SetDelay(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay = d
	p.changedLocked()
}

// SetReplyDelay delays every chunk the target sends back from now on by d
// (0: none), on top of SetDelay's: a request reaches the target at once and
// its answer comes late, as when a server acts on a request and the reply
// is held up.
func (p *Proxy) SetReplyDelay(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.replies = d
	p.changedLocked()
}

// Reset closes every open connection with a TCP reset; new ones are
// accepted as before.
func (p *Proxy) Reset() {
	p.mu.Lock()
	conns := make([]*conn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		c.reset()
	}
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return ErrClosed
	}
	p.closed = true
	p.changedLocked()
	p.mu.Unlock()
	err := p.ln.Close()
	p.Reset()
	p.wg.Wait()
	return err
}

func (p *Proxy) changedLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

func (c *conn) reset() {
	if tc, ok := c.client.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.client.Close()
	c.agent.Close()
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.serve(client)
	}
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	agent, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		client.Close()
		return
	}
	host, _, _ := net.SplitHostPort(client.RemoteAddr().String())
	c := &conn{host: host, client: client, agent: agent}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		c.reset()
		return
	}
	p.conns[c] = struct{}{}
	p.mu.Unlock()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pump(c, agent, client, false) }()
	go func() { defer wg.Done(); p.pump(c, client, agent, true) }()
	wg.Wait()
	client.Close()
	agent.Close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// pump copies src to dst, pausing while c is black-holed; reply tells the
// target's side to the client's. At the end of src it half-closes dst; on
// a failure it closes both sides, which ends the other direction too.
func (p *Proxy) pump(c *conn, dst, src net.Conn, reply bool) {
	buf := make([]byte, 32<<10)
	for {
		if !p.pass(c) {
			c.reset()
			return
		}
		n, err := src.Read(buf)
		if n > 0 {
			delay, ok := p.gate(c, reply)
			if !ok {
				c.reset()
				return
			}
			if delay > 0 {
				time.Sleep(delay)
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				c.reset()
				return
			}
		}
		if errors.Is(err, io.EOF) {
			if cw, ok := dst.(interface{ CloseWrite() error }); ok {
				cw.CloseWrite()
			}
			return
		}
		if err != nil {
			c.reset()
			return
		}
	}
}

// pass waits while c is black-holed; false once the proxy closed.
func (p *Proxy) pass(c *conn) bool {
	_, ok := p.gate(c, false)
	return ok
}

// gate waits while c is black-holed and returns the delay to apply to a
// chunk, a reply's if reply; false once the proxy closed.
func (p *Proxy) gate(c *conn, reply bool) (time.Duration, bool) {
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return 0, false
		}
		if !p.all && !p.hosts[c.host] {
			d := p.delay
			if reply {
				d += p.replies
			}
			p.mu.Unlock()
			return d, true
		}
		ch := p.changed
		p.mu.Unlock()
		<-ch
	}
}
