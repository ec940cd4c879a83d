package peers

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencedio/fenced/internal/testpki"
	"github.com/fencedio/fenced/server/internal/security"
)

// peerFiles writes a node certificate of ca and ca's certificate where a
// node's peer TLS flags name them, and returns those files.
func peerFiles(t *testing.T, ca *testpki.CA) security.TLSFiles {
	t.Helper()
	dir := t.TempDir()
	f := security.TLSFiles{CertFile: filepath.Join(dir, "peer.pem"), KeyFile: filepath.Join(dir, "peer-key.pem"),
		TrustedCAFile: filepath.Join(dir, "peer-ca.pem")}
	ca.Server(t, "node").CopyTo(t, f.CertFile, f.KeyFile)
	copyFile(t, ca.CertFile, f.TrustedCAFile)
	return f
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func peerMuxWithTLS(t *testing.T, files security.TLSFiles) (*Mux, *security.TLSReloader) {
	t.Helper()
	r, err := security.NewTLSReloader(files.Mutual())
	if err != nil {
		t.Fatal(err)
	}
	m, err := Listen("127.0.0.1:0", "", r, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m, r
}

// refused dials the peer port with conf (plaintext if nil), announces a
// forwarded call and sends a request; the port must close the connection
// without answering, and hand nothing to raft or the forwarded-call server.
func refused(t *testing.T, m *Mux, conf *tls.Config) {
	t.Helper()
	c, err := net.DialTimeout("tcp", m.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if conf != nil {
		tc := tls.Client(c, conf)
		if err := tc.Handshake(); err != nil {
			return // refused during the handshake (TLS 1.2, or a server certificate we do not trust)
		}
		c = tc
	}
	c.Write([]byte("APRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"))
	got, err := io.ReadAll(c)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("the peer port kept the connection open (read %q)", got)
	}
	if conf == nil && strings.Contains(string(got), "HTTP") {
		t.Fatalf("the peer port answered plaintext: %q", got)
	}
	for _, ch := range []chan net.Conn{m.raftConns, m.apiConns} {
		select {
		case in := <-ch:
			in.Close()
			t.Fatal("a refused connection was handed on")
		default:
		}
	}
}

// accepted dials m from a node with files and checks that the connection
// and its bytes arrive as a forwarded-call connection.
func accepted(t *testing.T, m *Mux, files security.TLSFiles) {
	t.Helper()
	from, _ := peerMuxWithTLS(t, files)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := from.DialKind(ctx, m.Addr().String(), KindAPI)
	if err != nil {
		t.Fatalf("a node with a peer certificate dials: %v", err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	in, err := m.APIListener().Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	in.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 4)
	if _, err := io.ReadFull(in, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("forwarded connection read %q, %v", buf, err)
	}
	if _, ok := in.(*tls.Conn); ok {
		t.Error("net/http would see a *tls.Conn and not speak HTTP/2 with prior knowledge on it")
	}
}

// With peer TLS on, the peer port takes only nodes holding a certificate
// of the peer CA that can serve a peer port: plaintext, no certificate,
// another CA's certificate, and a client certificate of the peer CA are all
// refused before anything reads the connection, so no one but a node can
// forward a call in a principal's name. Reload swaps the certificates for
// the next handshake.
func TestPeerTLSOnlyNodes(t *testing.T) {
	ca, other := testpki.NewCA(t, "peers"), testpki.NewCA(t, "other")
	files := peerFiles(t, ca)
	m, reloader := peerMuxWithTLS(t, files)

	trustPeers := &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1"}
	withCert := func(l *testpki.Leaf) *tls.Config {
		c := trustPeers.Clone()
		c.Certificates = []tls.Certificate{l.TLS}
		return c
	}
	for name, conf := range map[string]*tls.Config{
		"plaintext":                     nil,
		"no certificate":                trustPeers,
		"certificate of another CA":     withCert(other.Server(t, "intruder")),
		"client certificate of peer CA": withCert(ca.Client(t, "n9")),
	} {
		t.Run(name, func(t *testing.T) { refused(t, m, conf) })
	}
	accepted(t, m, peerFiles(t, ca))

	// A dialing node checks the listening node's certificate too.
	stranger, _ := peerMuxWithTLS(t, peerFiles(t, other))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if c, err := (&Mux{tls: reloader}).DialKind(ctx, stranger.Addr().String(), KindRaft); err == nil {
		c.Close()
		t.Error("dialed a peer port whose certificate the peer CA did not sign")
	}

	// Rotate to another CA: after Reload only its nodes get in.
	next := testpki.NewCA(t, "peers-next")
	next.Server(t, "node").CopyTo(t, files.CertFile, files.KeyFile)
	copyFile(t, next.CertFile, files.TrustedCAFile)
	if err := reloader.Reload(); err != nil {
		t.Fatal(err)
	}
	refused(t, m, withCert(ca.Server(t, "old")))
	accepted(t, m, peerFiles(t, next))
}
