package torture

import (
	"io"
	"net"
	"sync"
	"time"
)

// linkMode is what happens to the traffic of one directed link between
// two nodes.
type linkMode int

const (
	linkOK linkMode = iota
	// linkDrop cuts the link: open connections are closed at their next
	// byte and new ones are closed at once (a refused or reset connection).
	linkDrop
	// linkBlackHole keeps connections open and throws their bytes away:
	// the peer hears nothing and finds out only by its own timeouts.
	linkBlackHole
)

// netem is the network between a cluster's nodes: every node's raft peer
// port sits behind a linkProxy, and each node dials its peers from its own
// loopback address (127.0.0.x), so a proxy knows which node a connection
// comes from and can apply the state of that directed link.
type netem struct {
	mu    sync.Mutex
	byIP  map[string]int      // a node's source address -> its index
	mode  map[[2]int]linkMode // [from, to] -> mode; absent: linkOK
	delay map[[2]int]time.Duration
	conns map[*proxyConn]struct{}
}

func newNetem() *netem {
	return &netem{byIP: map[string]int{}, mode: map[[2]int]linkMode{}, delay: map[[2]int]time.Duration{}, conns: map[*proxyConn]struct{}{}}
}

// addNode names the node that dials from ip.
func (n *netem) addNode(ip string, i int) {
	n.mu.Lock()
	n.byIP[ip] = i
	n.mu.Unlock()
}

func (n *netem) link(from, to int) (linkMode, time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.mode[[2]int{from, to}], n.delay[[2]int{from, to}]
}

// partition cuts every link between a node of one group and a node of
// another, both directions, in mode m; links within a group are healed.
func (n *netem) partition(m linkMode, groups ...[]int) {
	n.mu.Lock()
	n.mode = map[[2]int]linkMode{}
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

// setDelay delays every chunk sent over the directed link from -> to.
func (n *netem) setDelay(from, to int, d time.Duration) {
	n.mu.Lock()
	n.delay[[2]int{from, to}] = d
	n.mu.Unlock()
}

// heal restores every link and closes the connections whose bytes were
// thrown away, so that both ends reconnect at once instead of waiting for
// their timeouts over a connection that lost data.
func (n *netem) heal() {
	n.mu.Lock()
	n.mode = map[[2]int]linkMode{}
	n.delay = map[[2]int]time.Duration{}
	var lossy []*proxyConn
	for c := range n.conns {
		if c.lossy {
			lossy = append(lossy, c)
		}
	}
	n.mu.Unlock()
	for _, c := range lossy {
		c.close()
	}
}

// closeCut closes the open connections of links now dropped.
func (n *netem) closeCut() {
	n.mu.Lock()
	var cut []*proxyConn
	for c := range n.conns {
		if n.mode[[2]int{c.from, c.to}] == linkDrop || n.mode[[2]int{c.to, c.from}] == linkDrop {
			cut = append(cut, c)
		}
	}
	n.mu.Unlock()
	for _, c := range cut {
		c.close()
	}
}

// linkProxy forwards connections to one node's peer port, applying the
// state of the link from the dialling node to it (and back, for the
// answers).
type linkProxy struct {
	net    *netem
	to     int
	target string
	ln     net.Listener
	wg     sync.WaitGroup
}

func newLinkProxy(n *netem, to int, target string) (*linkProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &linkProxy{net: n, to: to, target: target, ln: ln}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

func (p *linkProxy) Addr() string { return p.ln.Addr().String() }

func (p *linkProxy) close() {
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
		c.close()
	}
	p.wg.Wait()
}

func (p *linkProxy) accept() {
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
		if m, _ := p.net.link(from, p.to); m == linkDrop {
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
	lossy    bool // bytes were thrown away; guarded by netem.mu
}

func (c *proxyConn) close() {
	c.once.Do(func() {
		c.in.Close()
		if c.out != nil {
			c.out.Close()
		}
	})
}

func (p *linkProxy) serve(in net.Conn, from int) {
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
		c.close()
	}()
	done := make(chan struct{}, 2)
	go func() { p.pipe(c, in, out, from, p.to); done <- struct{}{} }()
	go func() { p.pipe(c, out, in, p.to, from); done <- struct{}{} }()
	<-done
	c.close()
	<-done
}

// pipe copies src to dst chunk by chunk, applying the link from -> to to
// each chunk.
func (p *linkProxy) pipe(c *proxyConn, src io.Reader, dst io.Writer, from, to int) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			m, d := p.net.link(from, to)
			switch m {
			case linkDrop:
				return
			case linkBlackHole:
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
