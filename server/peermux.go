package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// The peer port carries two kinds of connections, told apart by the first
// byte the dialer writes: raft's own RPCs, and lease API calls a follower
// forwards to the leader (HTTP/2 without TLS). One port means a follower
// needs nothing but the leader's raft address, which raft already knows, to
// reach the leader's API; and peer TLS (peertls.go), which wraps the whole
// connection before that byte, covers both.
const (
	peerRaft byte = 'R'
	peerAPI  byte = 'A'
)

// peerHandshakeTimeout bounds how long an accepted connection may take to
// complete its TLS handshake and send its first byte.
const peerHandshakeTimeout = 10 * time.Second

// peerMux accepts connections on the peer port and sorts them by their
// first byte. It is raft's StreamLayer (raft connections) and a
// net.Listener of forwarded API connections.
type peerMux struct {
	ln        net.Listener
	advertise net.Addr
	// local is the address peer connections are dialed from (nil: the
	// system's choice); see dialSource.
	local net.Addr
	// tls makes every connection mutual TLS; nil: plaintext.
	tls *TLSReloader
	log *slog.Logger

	raftConns chan net.Conn
	apiConns  chan net.Conn
	done      chan struct{}
	closeOnce sync.Once
}

var _ raft.StreamLayer = (*peerMux)(nil)

// listenPeers listens on addr; peers are told to dial advertise, or the
// address listened on if advertise is empty. With tls set, connections in
// both directions are mutual TLS (peertls.go); log receives refused
// handshakes.
func listenPeers(addr, advertise string, tls *TLSReloader, log *slog.Logger) (*peerMux, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	adv := ln.Addr()
	if advertise != "" {
		if adv, err = net.ResolveTCPAddr("tcp", advertise); err != nil {
			ln.Close()
			return nil, fmt.Errorf("raft address %q: %w", advertise, err)
		}
	}
	if ta, ok := adv.(*net.TCPAddr); !ok || ta.IP == nil || ta.IP.IsUnspecified() {
		ln.Close()
		return nil, fmt.Errorf("raft address %s: peers cannot dial an unspecified address", adv)
	}
	m := &peerMux{ln: ln, advertise: adv, local: dialSource(ln.Addr()), tls: tls, log: log, raftConns: make(chan net.Conn), apiConns: make(chan net.Conn), done: make(chan struct{})}
	go m.acceptLoop()
	return m, nil
}

func (m *peerMux) acceptLoop() {
	for {
		c, err := m.ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			m.Close()
			return
		}
		go m.sort(c)
	}
}

// sort completes the TLS handshake of c (with peer TLS on), reads its first
// byte and hands c to its consumer.
func (m *peerMux) sort(c net.Conn) {
	var b [1]byte
	c.SetDeadline(time.Now().Add(peerHandshakeTimeout))
	if m.tls != nil {
		tc := tls.Server(c, m.tls.peerServerConfig())
		if err := tc.Handshake(); err != nil {
			m.log.Warn("peer connection refused: TLS handshake failed", "remote", c.RemoteAddr().String(), "err", err)
			c.Close()
			return
		}
		c = peerConn{tc}
	}
	if _, err := c.Read(b[:]); err != nil {
		c.Close()
		return
	}
	c.SetDeadline(time.Time{})
	var to chan net.Conn
	switch b[0] {
	case peerRaft:
		to = m.raftConns
	case peerAPI:
		to = m.apiConns
	default:
		c.Close()
		return
	}
	select {
	case to <- c:
	case <-m.done:
		c.Close()
	}
}

// Accept returns the next raft connection.
func (m *peerMux) Accept() (net.Conn, error) { return m.accept(m.raftConns, nil) }

func (m *peerMux) accept(from chan net.Conn, closed <-chan struct{}) (net.Conn, error) {
	select {
	case c := <-from:
		return c, nil
	case <-m.done:
		return nil, net.ErrClosed
	case <-closed:
		return nil, net.ErrClosed
	}
}

// Close stops accepting both kinds of connections.
func (m *peerMux) Close() error {
	var err error
	m.closeOnce.Do(func() {
		close(m.done)
		err = m.ln.Close()
	})
	return err
}

// Addr is the address peers dial: raft stores it in the configuration.
func (m *peerMux) Addr() net.Addr { return m.advertise }

// Dial opens a raft connection to a peer.
func (m *peerMux) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return m.dial(ctx, string(address), peerRaft)
}

// dialSource is the address to dial peers from when listening on listen: on
// a loopback address other than 127.0.0.1, that address. Nodes on one
// machine given 127.0.0.2, 127.0.0.3, ... are then told apart by the source
// of their connections, which lets a test proxy cut one link (node A to
// node B) and not another (C to B); otherwise every loopback connection
// comes from 127.0.0.1. Other addresses leave the choice to the system,
// whose routing knows the way to remote peers.
func dialSource(listen net.Addr) net.Addr {
	ta, ok := listen.(*net.TCPAddr)
	if !ok || !ta.IP.IsLoopback() || ta.IP.Equal(net.IPv4(127, 0, 0, 1)) || ta.IP.Equal(net.IPv6loopback) {
		return nil
	}
	return &net.TCPAddr{IP: ta.IP}
}

// dial connects to the peer port at address and announces kind.
func (m *peerMux) dial(ctx context.Context, address string, kind byte) (net.Conn, error) {
	var conf *tls.Config
	if m.tls != nil {
		conf = m.tls.peerClientConfig(address)
	}
	return dialPeer(ctx, net.Dialer{LocalAddr: m.local}, address, kind, conf)
}

// apiListener returns a net.Listener of forwarded API connections. Closing
// it leaves the raft side open.
func (m *peerMux) apiListener() net.Listener {
	return &apiListener{m: m, closed: make(chan struct{})}
}

type apiListener struct {
	m      *peerMux
	closed chan struct{}
	once   sync.Once
}

func (l *apiListener) Accept() (net.Conn, error) { return l.m.accept(l.m.apiConns, l.closed) }
func (l *apiListener) Addr() net.Addr            { return l.m.advertise }
func (l *apiListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

// dialPeer connects to a peer port, over TLS with conf unless it is nil,
// and announces the kind of connection.
func dialPeer(ctx context.Context, d net.Dialer, address string, kind byte, conf *tls.Config) (net.Conn, error) {
	c, err := d.DialContext(ctx, "tcp", address)
	if err != nil {
		return nil, err
	}
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(peerHandshakeTimeout)
	}
	c.SetDeadline(dl) // a peer that stalls the handshake cannot hold the dialer
	if conf != nil {
		tc := tls.Client(c, conf)
		if err := tc.HandshakeContext(ctx); err != nil {
			c.Close()
			return nil, fmt.Errorf("peer tls with %s: %w", address, err)
		}
		c = tc
	}
	if _, err := c.Write([]byte{kind}); err != nil {
		c.Close()
		return nil, err
	}
	c.SetDeadline(time.Time{})
	return c, nil
}
