package security

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
)

// Peer TLS
//
// With Config.PeerTLS set (fenced --peer-cert-file, --peer-key-file,
// --peer-trusted-ca-file) every connection on the peer port, raft's and
// the calls followers forward alike, is mutual TLS: the dialing node
// verifies the listening node's certificate against the peer CA and the
// address it dialed, and the listening node requires a certificate that
// chains to the peer CA and may serve a peer port itself (extended key
// usage serverAuth, or none). A plaintext connection, one without a
// certificate, or one whose certificate the peer CA did not sign fails its
// handshake and is closed before its first byte is read; so does a client
// certificate (clientAuth only) even when the peer CA signed it. Only
// connections that pass reach raft or the forwarded-call handler, which
// takes the principal a forwarding node names: with peer TLS on, only a
// node holding a peer certificate can speak in a principal's name.
//
// The files are read again on Reload: new handshakes use them, open
// connections keep theirs. Without peer TLS the peer port is plaintext and
// unauthenticated, and whoever can reach it can act as a member of the
// cluster (docs/security.md).

// Mutual returns f with client certificates required: peers always
// authenticate each other.
func (f TLSFiles) Mutual() TLSFiles {
	f.ClientCertAuth = true
	return f
}

// ValidatePeer checks the peer TLS files: all three, or none.
func (f TLSFiles) ValidatePeer() error {
	set := 0
	for _, name := range []string{f.CertFile, f.KeyFile, f.TrustedCAFile} {
		if name != "" {
			set++
		}
	}
	if set != 0 && set != 3 {
		return errors.New("peer tls: --peer-cert-file, --peer-key-file and --peer-trusted-ca-file go together: " +
			"peers verify each other's certificates (mutual TLS)")
	}
	return nil
}

// PeerServerConfig returns the tls.Config of the peer port's listening
// side, picking up every Reload at the next handshake.
func (r *TLSReloader) PeerServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			c := r.cur.Load().Clone()
			c.NextProtos = nil
			c.ClientAuth = tls.RequireAndVerifyClientCert
			c.VerifyConnection = verifyNodeCertificate
			return c, nil
		},
	}
}

// PeerClientConfig returns the tls.Config to dial the peer port at
// address with: this node's certificate, the peer CA, and the dialed host
// as the name the other node's certificate must carry.
func (r *TLSReloader) PeerClientConfig(address string) *tls.Config {
	cur := r.cur.Load()
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		host = address
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: cur.Certificates,
		RootCAs:      cur.ClientCAs,
		ServerName:   host,
	}
}

// verifyNodeCertificate refuses a dialing peer whose certificate could not
// serve a peer port: a node's certificate serves its own peer port too, so
// it carries serverAuth (or no extended key usage at all), whereas a
// certificate issued to a client carries clientAuth alone. This keeps
// clients out of the peer port even where one CA signs both kinds.
func verifyNodeCertificate(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("peer tls: no certificate")
	}
	leaf := cs.PeerCertificates[0]
	if len(leaf.ExtKeyUsage) == 0 {
		return nil
	}
	for _, u := range leaf.ExtKeyUsage {
		if u == x509.ExtKeyUsageServerAuth || u == x509.ExtKeyUsageAny {
			return nil
		}
	}
	return fmt.Errorf("peer tls: certificate %q is not a node certificate (no serverAuth usage)", leaf.Subject.String())
}

// PeerConn is a peer connection that passed its TLS handshake. It hides
// the *tls.Conn from net/http, which would otherwise serve it as HTTPS
// with ALPN; forwarded calls speak HTTP/2 with prior knowledge inside it.
type PeerConn struct{ net.Conn }
