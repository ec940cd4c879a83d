package peers

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/fencedio/fenced/internal/failpoint"
	"github.com/fencedio/fenced/server/internal/security"
	"github.com/hashicorp/raft"
)

// The peer port carries two kinds of connections, told apart by the first
// byte the dialer writes: raft's own RPCs, and lease API calls a follower
// forwards to the leader (HTTP/2 without TLS). One port means a follower
// needs nothing but the leader's raft address, which raft already knows, to
// reach the leader's API; and peer TLS (internal/security/peertls.go), which wraps the whole
// connection before that byte, covers both.
//
// After that byte each end says who it is (Hello), the dialer first:
// its cluster ID, node ID and instance (identity.go). The listener refuses
// a peer whose cluster ID differs from its own, and says so in its answer;
// the dialer checks the listener's answer the same way. Two more kinds
// carry no stream: a status query, answered with the hello alone (a member
// forming a cluster asks its peers; member add asks the new member), and
// an admission, which makes a member waiting to be added part of the
// dialer's cluster.
const (
	KindRaft   byte = 'R'
	KindAPI    byte = 'A'
	KindStatus byte = 'S'
	KindAdmit  byte = 'J'
)

// Hello is what each end of a peer connection says of itself.
type Hello struct {
	Cluster  string `json:"clusterId,omitempty"`
	Node     string `json:"node,omitempty"`
	Instance string `json:"instance,omitempty"`
	// Votes: the member's data directory holds state the cluster counts
	// on; HasState: it holds raft state; Joining: it was started to be
	// added to a running cluster.
	Votes    bool              `json:"votes,omitempty"`
	HasState bool              `json:"hasState,omitempty"`
	Joining  bool              `json:"joining,omitempty"`
	Initial  map[string]string `json:"initialMembers,omitempty"`
	// LastTerm and LastIndex are where the member's log ends (the
	// listener's: once it has read the dialer's hello): a dialer that saw
	// it acknowledge more before it sent its hello refuses it as rolled
	// back (acks.go).
	LastTerm  uint64 `json:"lastTerm,omitempty"`
	LastIndex uint64 `json:"lastIndex,omitempty"`
	// Admit, from the dialer of an admission, names the member admitted.
	Admit string `json:"admit,omitempty"`
	// Refused, in the listener's answer, says why it refuses.
	Refused string `json:"refused,omitempty"`
}

// Self is the node behind a peer port: what it says of itself, how it
// checks the answer of a peer of its own cluster it dials (Checker, called
// before the hello goes out: a rolled-back peer is refused), and how it
// takes an admission.
type Self interface {
	Hello() Hello
	Checker() func(answer Hello, addr string) error
	Admit(from Hello) error
}

// maxHello bounds a hello on the wire (its length is a uint16).
const maxHello = 1<<16 - 1

// checkPeer refuses a peer of another cluster: both IDs known and unequal.
func checkPeer(local, remote Hello, addr string) error {
	if failpoint.Enabled(failpoint.HelloAcceptsAnyCluster) {
		return nil
	}
	if local.Cluster != "" && remote.Cluster != "" && local.Cluster != remote.Cluster {
		return &ClusterMismatchError{Peer: remote.Node + " (" + addr + ")", Cluster: local.Cluster, PeerCluster: remote.Cluster}
	}
	return nil
}

func writeHello(w io.Writer, kind byte, h Hello) error {
	b, err := json.Marshal(h)
	if err != nil {
		return err
	}
	if len(b) > maxHello {
		return fmt.Errorf("peer hello of %d bytes", len(b))
	}
	frame := make([]byte, 0, 3+len(b))
	if kind != 0 {
		frame = append(frame, kind)
	}
	frame = binary.BigEndian.AppendUint16(frame, uint16(len(b)))
	_, err = w.Write(append(frame, b...))
	return err
}

func readHello(r io.Reader) (Hello, error) {
	var n [2]byte
	var h Hello
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return h, err
	}
	b := make([]byte, binary.BigEndian.Uint16(n[:]))
	if _, err := io.ReadFull(r, b); err != nil {
		return h, err
	}
	return h, json.Unmarshal(b, &h)
}

// HandshakeTimeout bounds how long an accepted connection may take to
// complete its TLS handshake and send its first byte.
const HandshakeTimeout = 10 * time.Second

// Mux accepts connections on the peer port and sorts them by their
// first byte. It is raft's StreamLayer (raft connections) and a
// net.Listener of forwarded API connections.
type Mux struct {
	ln        net.Listener
	advertise net.Addr
	// local is the address peer connections are dialed from (nil: the
	// system's choice); see dialSource.
	local net.Addr
	// tls makes every connection mutual TLS; nil: plaintext.
	tls *security.TLSReloader
	log *slog.Logger

	// self says who this node is on every connection; nil: nobody (tests).
	self Self

	raftConns chan net.Conn
	apiConns  chan net.Conn
	done      chan struct{}
	closeOnce sync.Once

	refusalsMu sync.Mutex
	refusals   map[string]time.Time // last logged refusal, by peer address
}

// hello is what this node says of itself.
func (m *Mux) hello() Hello {
	if m.self == nil {
		return Hello{}
	}
	return m.self.Hello()
}

// logRefusal logs a refused peer connection, once a minute per peer (key).
func (m *Mux) logRefusal(key string, err error) {
	m.refusalsMu.Lock()
	last, seen := m.refusals[key]
	fresh := !seen || time.Since(last) > time.Minute
	if fresh {
		if m.refusals == nil {
			m.refusals = map[string]time.Time{}
		}
		m.refusals[key] = time.Now()
	}
	m.refusalsMu.Unlock()
	if fresh && m.log != nil {
		m.log.Error("peer connection refused", "err", err)
	}
}

var _ raft.StreamLayer = (*Mux)(nil)

// Listen listens on addr; peers are told to dial advertise, or the
// address listened on if advertise is empty. With tls set, connections in
// both directions are mutual TLS (internal/security/peertls.go); log receives refused
// handshakes. self answers for the node from the first connection on: a
// peer that asked before it was set was told nothing of the node (an empty
// name), which a forming member took for a wrong --initial-cluster.
func Listen(addr, advertise string, tls *security.TLSReloader, log *slog.Logger, self Self) (*Mux, error) {
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
	m := &Mux{ln: ln, advertise: adv, local: dialSource(ln.Addr()), tls: tls, log: log, self: self,
		raftConns: make(chan net.Conn), apiConns: make(chan net.Conn), done: make(chan struct{})}
	go m.acceptLoop()
	return m, nil
}

func (m *Mux) acceptLoop() {
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
func (m *Mux) sort(c net.Conn) {
	var b [1]byte
	c.SetDeadline(time.Now().Add(HandshakeTimeout))
	if m.tls != nil {
		tc := tls.Server(c, m.tls.PeerServerConfig())
		if err := tc.Handshake(); err != nil {
			m.log.Warn("peer connection refused: TLS handshake failed", "remote", c.RemoteAddr().String(), "err", err)
			c.Close()
			return
		}
		c = security.PeerConn{Conn: tc}
	}
	if _, err := c.Read(b[:]); err != nil {
		c.Close()
		return
	}
	var to chan net.Conn
	switch b[0] {
	case KindRaft:
		to = m.raftConns
	case KindAPI:
		to = m.apiConns
	case KindStatus, KindAdmit:
	default:
		c.Close()
		return
	}
	remote, err := readHello(c)
	if err != nil {
		c.Close()
		return
	}
	local := m.hello()
	err = checkPeer(local, remote, c.RemoteAddr().String())
	if err == nil && b[0] == KindAdmit {
		if m.self == nil {
			err = errors.New("this peer port takes no admission")
		} else if err = m.self.Admit(remote); err == nil {
			local = m.hello()
		}
	}
	if err != nil {
		local.Refused = err.Error()
		m.logRefusal(remote.Node+" "+remote.Cluster, err)
	}
	if werr := writeHello(c, 0, local); werr != nil || err != nil || to == nil {
		c.Close()
		return
	}
	c.SetDeadline(time.Time{})
	select {
	case to <- c:
	case <-m.done:
		c.Close()
	}
}

// Accept returns the next raft connection.
func (m *Mux) Accept() (net.Conn, error) { return m.accept(m.raftConns, nil) }

func (m *Mux) accept(from chan net.Conn, closed <-chan struct{}) (net.Conn, error) {
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
func (m *Mux) Close() error {
	var err error
	m.closeOnce.Do(func() {
		close(m.done)
		err = m.ln.Close()
	})
	return err
}

// Addr is the address peers dial: raft stores it in the configuration.
func (m *Mux) Addr() net.Addr { return m.advertise }

// Dial opens a raft connection to a peer.
func (m *Mux) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return m.DialKind(ctx, string(address), KindRaft)
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

// dial connects to the peer port at address, announces kind and
// exchanges hellos: a peer of another cluster is refused.
func (m *Mux) DialKind(ctx context.Context, address string, kind byte) (net.Conn, error) {
	c, _, err := m.dialHello(ctx, address, kind, m.hello())
	return c, err
}

func (m *Mux) dialHello(ctx context.Context, address string, kind byte, h Hello) (net.Conn, Hello, error) {
	var conf *tls.Config
	if m.tls != nil {
		conf = m.tls.PeerClientConfig(address)
	}
	var check func(Hello, string) error
	if m.self != nil {
		check = m.self.Checker()
	}
	c, answer, err := dialPeer(ctx, net.Dialer{LocalAddr: m.local}, address, kind, conf, h)
	if err == nil && check != nil {
		if err = check(answer, address); err != nil {
			c.Close()
		}
	}
	if err != nil {
		if errors.Is(err, ErrClusterMismatch) || errors.Is(err, ErrRolledBack) {
			m.logRefusal(address, err)
		}
		return nil, answer, err
	}
	return c, answer, nil
}

// status asks the peer at address who it is.
func (m *Mux) Status(ctx context.Context, address string) (Hello, error) {
	c, answer, err := m.dialHello(ctx, address, KindStatus, m.hello())
	if err != nil {
		return answer, err
	}
	c.Close()
	return answer, nil
}

// admitPeer makes the member node waiting at address a voting member of
// this node's cluster, and returns what it says of itself then.
func (m *Mux) AdmitPeer(ctx context.Context, address, node string) (Hello, error) {
	h := m.hello()
	h.Admit = node
	c, answer, err := m.dialHello(ctx, address, KindAdmit, h)
	if err != nil {
		return answer, err
	}
	c.Close()
	return answer, nil
}

// apiListener returns a net.Listener of forwarded API connections. Closing
// it leaves the raft side open.
func (m *Mux) APIListener() net.Listener {
	return &apiListener{m: m, closed: make(chan struct{})}
}

type apiListener struct {
	m      *Mux
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
// announces the kind of connection and says hello; it returns the peer's
// answer, and an error if either end refuses the other.
func dialPeer(ctx context.Context, d net.Dialer, address string, kind byte, conf *tls.Config, hello Hello) (net.Conn, Hello, error) {
	var answer Hello
	c, err := d.DialContext(ctx, "tcp", address)
	if err != nil {
		return nil, answer, err
	}
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(HandshakeTimeout)
	}
	c.SetDeadline(dl) // a peer that stalls the handshake cannot hold the dialer
	if conf != nil {
		tc := tls.Client(c, conf)
		if err := tc.HandshakeContext(ctx); err != nil {
			c.Close()
			return nil, answer, fmt.Errorf("peer tls with %s: %w", address, err)
		}
		c = tc
	}
	if err := writeHello(c, kind, hello); err != nil {
		c.Close()
		return nil, answer, err
	}
	if answer, err = readHello(c); err != nil {
		c.Close()
		return nil, answer, fmt.Errorf("peer %s: no hello: %w", address, err)
	}
	if err := checkPeer(hello, answer, address); err != nil {
		c.Close()
		return nil, answer, err
	}
	if answer.Refused != "" {
		c.Close()
		return nil, answer, fmt.Errorf("peer %s (%s) refused the connection: %s", answer.Node, address, answer.Refused)
	}
	c.SetDeadline(time.Time{})
	return c, answer, nil
}

// ListenAddr is the address the peer port listens on.
func (m *Mux) ListenAddr() net.Addr { return m.ln.Addr() }
