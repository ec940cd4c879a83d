package netfault

import (
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// NodeIP is the loopback address of node i of a cluster: distinct per node,
// so that the link proxies tell the nodes apart by the source of their
// connections (a node dials its peers from the address it listens on).
func NodeIP(i int) string { return fmt.Sprintf("127.0.0.%d", 11+i) }

// LinkMode is what happens to the traffic of one directed link between
// two nodes.
type LinkMode int

const (
	LinkOK LinkMode = iota
	// LinkDrop cuts the link: open connections are closed at their next
	// byte and new ones are closed at once (a refused or reset connection).
	LinkDrop
	// LinkBlackHole keeps connections open and throws their bytes away:
	// the peer hears nothing and finds out only by its own timeouts.
	LinkBlackHole
)

// Network is the network between a cluster's nodes: every node's raft peer
// port sits behind a LinkProxy, and each node dials its peers from its own
// loopback address (127.0.0.x), so a proxy knows which node a connection
// comes from and can apply the state of that directed link.
type Network struct {
	mu    sync.Mutex
	byIP  map[string]int      // a node's source address -> its index
	mode  map[[2]int]LinkMode // [from, to] -> mode; absent: linkOK
	delay map[[2]int]time.Duration
	conns map[*proxyConn]struct{}
}

// NewNetwork returns a network with every link healthy.
func NewNetwork() *Network {
	return &Network{byIP: map[string]int{}, mode: map[[2]int]LinkMode{}, delay: map[[2]int]time.Duration{}, conns: map[*proxyConn]struct{}{}}
}

// AddNode names the node that dials from ip.
func (n *Network) AddNode(ip string, i int) {
	n.mu.Lock()
	n.byIP[ip] = i
	n.mu.Unlock()
}

func (n *Network) link(from, to int) (LinkMode, time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.mode[[2]int{from, to}], n.delay[[2]int{from, to}]
}

// Partition cuts every link between a node of one group and a node of
// another, both directions, in mode m; links within a group are healed.
func (n *Network) Partition(m LinkMode, groups ...[]int) {
	n.mu.Lock()
	n.mode = map[[2]int]LinkMode{}
	for gi, g := range groups {
		for gj, h := range groups {
			if gi == gj {
				continue
			}
			for _, a := range g {
				for _, b := range h {
					n.mode[[2]int{a, b}] = m
				}
			}
		}
	}
	n.mu.Unlock()
	n.closeCut()
}

// SetDelay delays every chunk sent over the directed link from -> to.
func (n *Network) SetDelay(from, to int, d time.Duration) {
	n.mu.Lock()
	n.delay[[2]int{from, to}] = d
	n.mu.Unlock()
}

// Heal restores every link and closes the connections whose bytes were
// thrown away, so that both ends reconnect at once instead of waiting for
// their timeouts over a connection that lost data.
func (n *Network) Heal() {
	n.mu.Lock()
	n.mode = map[[2]int]LinkMode{}
	n.delay = map[[2]int]time.Duration{}
	var lossy []*proxyConn
	for c := range n.conns {
		if c.lossy {
			lossy = append(lossy, c)
		}
	}
	n.mu.Unlock()
	for _, c := range lossy {
		c.Close()
	}
}

// closeCut closes the open connections of links now dropped.
func (n *Network) closeCut() {
	n.mu.Lock()
	var cut []*proxyConn
	for c := range n.conns {
		if n.mode[[2]int{c.from, c.to}] == LinkDrop || n.mode[[2]int{c.to, c.from}] == LinkDrop {
			cut = append(cut, c)
		}
	}
	n.mu.Unlock()
	for _, c := range cut {
		c.Close()
	}
}

// LinkProxy forwards connections to one node's peer port, applying the
// state of the link from the dialling node to it (and back, for the
// answers).
type LinkProxy struct {
	net    *Network
	to     int
	target string
	ln     net.Listener
	wg     sync.WaitGroup
}

// NewLinkProxy listens on a loopback port and forwards each connection to
// target, node to's raft peer port, as the link to it from the dialling
// node allows.
func NewLinkProxy(n *Network, to int, target string) (*LinkProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &LinkProxy{net: n, to: to, target: target, ln: ln}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's address: node to's advertised raft address.
func (p *LinkProxy) Addr() string { return p.ln.Addr().String() }

// Close stops accepting, closes the proxy's connections and waits for
// them.
func (p *LinkProxy) Close() {
	p.ln.Close()
	p.net.mu.Lock()
	var mine []*proxyConn
	for c := range p.net.conns {
		if c.to == p.to {
			mine = append(mine, c)
		}
	}
	p.net.mu.Unlock()
	for _, c := range mine {
		c.Close()
	}
	p.wg.Wait()
}

func (p *LinkProxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		from := -1 // not a node (fencectl member, say): never cut
		if ta, ok := in.RemoteAddr().(*net.TCPAddr); ok {
			p.net.mu.Lock()
			if i, ok := p.net.byIP[ta.IP.String()]; ok {
				from = i
			}
			p.net.mu.Unlock()
		}
		if m, _ := p.net.link(from, p.to); m == LinkDrop {
			in.Close()
			continue
		}
		p.wg.Add(1)
		go func() { defer p.wg.Done(); p.serve(in, from) }()
	}
}

// proxyConn is one proxied connection from node `from` to node `to`.
type proxyConn struct {
	from, to int
	in, out  net.Conn
	once     sync.Once
	lossy    bool // bytes were thrown away; guarded by Network.mu
}

func (c *proxyConn) Close() {
	c.once.Do(func() {
		c.in.Close()
		if c.out != nil {
			c.out.Close()
		}
	})
}

func (p *LinkProxy) serve(in net.Conn, from int) {
	out, err := net.DialTimeout("tcp", p.target, 2*time.Second)
	if err != nil {
		in.Close()
		return
	}
	c := &proxyConn{from: from, to: p.to, in: in, out: out}
	p.net.mu.Lock()
	p.net.conns[c] = struct{}{}
	p.net.mu.Unlock()
	defer func() {
		p.net.mu.Lock()
		delete(p.net.conns, c)
		p.net.mu.Unlock()
		c.Close()
	}()
	done := make(chan struct{}, 2)
	go func() { p.pipe(c, in, out, from, p.to); done <- struct{}{} }()
	go func() { p.pipe(c, out, in, p.to, from); done <- struct{}{} }()
	<-done
	c.Close()
	<-done
}

// pipe copies src to dst chunk by chunk, applying the link from -> to to
// each chunk.
func (p *LinkProxy) pipe(c *proxyConn, src io.Reader, dst io.Writer, from, to int) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			m, d := p.net.link(from, to)
			switch m {
			case LinkDrop:
				return
			case LinkBlackHole:
				p.net.mu.Lock()
				c.lossy = true
				p.net.mu.Unlock()
			default:
				if d > 0 {
					time.Sleep(d)
				}
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}
