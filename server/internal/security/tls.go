package security

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
)

// TLSFiles names the certificate files of one TLS endpoint, with etcd's
// flag names (--cert-file, --key-file, --trusted-ca-file,
// --client-cert-auth). The client API uses one; raft peer traffic uses
// another of the same kind, always mutual (peertls.go).
type TLSFiles struct {
	// CertFile and KeyFile are this node's certificate (PEM, chain after
	// the leaf) and its private key. Setting them turns TLS on: the
	// endpoint then speaks only TLS.
	CertFile, KeyFile string
	// TrustedCAFile holds the CA certificates (PEM) that client
	// certificates must chain to. Without ClientCertAuth, a client
	// certificate is still verified against it when offered.
	TrustedCAFile string
	// ClientCertAuth requires every client to present a certificate that
	// chains to TrustedCAFile.
	ClientCertAuth bool
}

// Enabled reports whether the files turn TLS on.
func (f TLSFiles) Enabled() bool { return f.CertFile != "" }

// Validate checks the combination of files; it does not read them.
func (f TLSFiles) Validate() error {
	var errs []error
	if (f.CertFile == "") != (f.KeyFile == "") {
		errs = append(errs, errors.New("tls: cert file and key file go together"))
	}
	if !f.Enabled() && (f.TrustedCAFile != "" || f.ClientCertAuth) {
		errs = append(errs, errors.New("tls: a trusted CA file or client cert auth needs a cert file and key file"))
	}
	if f.ClientCertAuth && f.TrustedCAFile == "" {
		errs = append(errs, errors.New("tls: client cert auth needs a trusted CA file"))
	}
	return errors.Join(errs...)
}

// load reads the files into a server-side tls.Config.
func (f TLSFiles) load() (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("tls: load key pair: %w", err)
	}
	c := &tls.Config{
		Certificates: []tls.Certificate{cert},
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"h2", "http/1.1"},
	}
	if f.TrustedCAFile != "" {
		if c.ClientCAs, err = loadCertPool(f.TrustedCAFile); err != nil {
			return nil, err
		}
		c.ClientAuth = tls.VerifyClientCertIfGiven
		if f.ClientCertAuth {
			c.ClientAuth = tls.RequireAndVerifyClientCert
		}
	}
	return c, nil
}

func loadCertPool(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tls: trusted CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("tls: trusted CA file %s holds no PEM certificate", path)
	}
	return pool, nil
}

// TLSReloader serves the current contents of a TLSFiles: Reload swaps in
// newly read files for every handshake that follows, while connections
// already open keep theirs.
type TLSReloader struct {
	files TLSFiles
	cur   atomic.Pointer[tls.Config]
}

// NewTLSReloader reads files once; it fails if they cannot be used.
func NewTLSReloader(files TLSFiles) (*TLSReloader, error) {
	r := &TLSReloader{files: files}
	if err := r.Reload(); err != nil {
		return nil, err
	}
	return r, nil
}

// Reload reads the files again. On error the previous files stay in use.
func (r *TLSReloader) Reload() error {
	c, err := r.files.load()
	if err != nil {
		return err
	}
	r.cur.Store(c)
	return nil
}

// ServerConfig returns a tls.Config for a listener that picks up every
// Reload at the next handshake.
func (r *TLSReloader) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2", "http/1.1"},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return r.cur.Load(), nil
		},
	}
}

// Files names the files a node's security is read from; an empty name
// (or TLSFiles without a certificate) leaves that part off.
type Files struct {
	TLS, PeerTLS   TLSFiles
	AuthFile       string
	SigningKeyFile string
}

// State is a node's TLS, auth and signing state. Reload swaps each part
// that loads; a part that fails keeps what it had.
type State struct {
	files Files
	TLS   *TLSReloader // nil without TLS
	Peer  *TLSReloader // nil without peer TLS
	pol   atomic.Pointer[Policy]
	keys  atomic.Pointer[Keyring] // nil: token signing off
}

// New reads every file of files.
func New(files Files) (*State, error) {
	sec := &State{files: files}
	if files.TLS.Enabled() {
		var err error
		if sec.TLS, err = NewTLSReloader(files.TLS); err != nil {
			return nil, err
		}
	}
	if files.PeerTLS.Enabled() {
		var err error
		if sec.Peer, err = NewTLSReloader(files.PeerTLS.Mutual()); err != nil {
			return nil, fmt.Errorf("peer %w", err)
		}
	}
	if files.AuthFile != "" {
		p, err := LoadPolicy(files.AuthFile)
		if err != nil {
			return nil, err
		}
		sec.pol.Store(p)
	}
	if files.SigningKeyFile != "" {
		kr, err := loadKeyring(files.SigningKeyFile)
		if err != nil {
			return nil, err
		}
		sec.keys.Store(kr)
	}
	return sec, nil
}

// Policy returns the auth policy in force; nil while auth is off.
func (sec *State) Policy() *Policy {
	if sec == nil {
		return nil
	}
	return sec.pol.Load()
}

// Keys returns the signing keys in force; nil while signing is off.
func (sec *State) Keys() *Keyring { return sec.keys.Load() }

// Reload reads the certificate files (API and peer), the auth file and the
// signing keys again. What fails to load keeps its previous contents, and
// the errors are returned.
func (sec *State) Reload() error {
	var errs []error
	if sec.TLS != nil {
		errs = append(errs, sec.TLS.Reload())
	}
	if sec.Peer != nil {
		if err := sec.Peer.Reload(); err != nil {
			errs = append(errs, fmt.Errorf("peer %w", err))
		}
	}
	if sec.files.AuthFile != "" {
		p, err := LoadPolicy(sec.files.AuthFile)
		if err == nil {
			sec.pol.Store(p)
		}
		errs = append(errs, err)
	}
	if sec.files.SigningKeyFile != "" {
		kr, err := loadKeyring(sec.files.SigningKeyFile)
		if err == nil {
			sec.keys.Store(kr)
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
