// Package testpki makes throwaway certificate authorities and certificates
// for tests, written as PEM files the way an operator would deploy them.
package testpki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority whose certificate is in CertFile.
type CA struct {
	Cert     *x509.Certificate
	key      *ecdsa.PrivateKey
	CertFile string
	dir      string
}

// NewCA makes a CA named name and writes its certificate under t.TempDir().
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ca := &CA{Cert: cert, key: key, dir: dir, CertFile: filepath.Join(dir, name+"-ca.pem")}
	writePEM(t, ca.CertFile, "CERTIFICATE", der)
	return ca
}

// Pool returns a pool holding the CA's certificate.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Leaf is an issued certificate and its key, as files and as a
// tls.Certificate.
type Leaf struct {
	CertFile, KeyFile string
	TLS               tls.Certificate
	Cert              *x509.Certificate
}

// Server issues a server certificate for 127.0.0.1 and localhost.
func (ca *CA) Server(t testing.TB, name string) *Leaf {
	t.Helper()
	return ca.issue(t, name, &x509.Certificate{
		Subject:     pkix.Name{CommonName: name},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	})
}

// Client issues a client certificate with subject CN cn (none when empty)
// and the given DNS SANs.
func (ca *CA) Client(t testing.TB, cn string, dnsNames ...string) *Leaf {
	t.Helper()
	return ca.issue(t, "client-"+cn+"-"+serial(t).String(), &x509.Certificate{
		Subject:     pkix.Name{CommonName: cn},
		DNSNames:    dnsNames,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
}

func (ca *CA) issue(t testing.TB, file string, tmpl *x509.Certificate) *Leaf {
	key := newKey(t)
	tmpl.SerialNumber = serial(t)
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(24 * time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	l := &Leaf{CertFile: filepath.Join(ca.dir, file+".pem"), KeyFile: filepath.Join(ca.dir, file+"-key.pem")}
	writePEM(t, l.CertFile, "CERTIFICATE", der)
	writePEM(t, l.KeyFile, "EC PRIVATE KEY", keyDER)
	if l.TLS, err = tls.LoadX509KeyPair(l.CertFile, l.KeyFile); err != nil {
		t.Fatal(err)
	}
	if l.Cert, err = x509.ParseCertificate(der); err != nil {
		t.Fatal(err)
	}
	return l
}

// CopyTo writes the leaf's files over certFile and keyFile, as an operator
// replacing a certificate would.
func (l *Leaf) CopyTo(t testing.TB, certFile, keyFile string) {
	t.Helper()
	for src, dst := range map[string]string{l.CertFile: certFile, l.KeyFile: keyFile} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func serial(t testing.TB) *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
