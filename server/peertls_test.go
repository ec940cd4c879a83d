package server

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fencedio/fenced/internal/testpki"
	"github.com/fencedio/fenced/internal/testutil"
)

// peerFiles writes a node certificate of ca and ca's certificate where a
// node's peer TLS flags name them, and returns those files.
func peerFiles(t *testing.T, ca *testpki.CA) TLSFiles {
	t.Helper()
	dir := t.TempDir()
	f := TLSFiles{CertFile: filepath.Join(dir, "peer.pem"), KeyFile: filepath.Join(dir, "peer-key.pem"),
		TrustedCAFile: filepath.Join(dir, "peer-ca.pem")}
	ca.Server(t, "node").CopyTo(t, f.CertFile, f.KeyFile)
	copyFile(t, ca.CertFile, f.TrustedCAFile)
	return f
}

func TestPeerTLSHalfConfigured(t *testing.T) {
	ca := testpki.NewCA(t, "peers")
	full := peerFiles(t, ca)
	for name, f := range map[string]TLSFiles{
		"cert only":        {CertFile: full.CertFile},
		"cert and key":     {CertFile: full.CertFile, KeyFile: full.KeyFile},
		"cert and CA":      {CertFile: full.CertFile, TrustedCAFile: full.TrustedCAFile},
		"CA only":          {TrustedCAFile: full.TrustedCAFile},
		"key and CA":       {KeyFile: full.KeyFile, TrustedCAFile: full.TrustedCAFile},
		"client cert auth": {ClientCertAuth: true, CertFile: full.CertFile},
	} {
		err := Config{DataDir: t.TempDir(), PeerTLS: f}.Validate()
		if err == nil || !strings.Contains(err.Error(), "--peer-cert-file, --peer-key-file and --peer-trusted-ca-file go together") {
			t.Errorf("%s: %v, want the peer files to be refused", name, err)
		}
	}
	if err := (Config{DataDir: t.TempDir(), PeerTLS: full}).Validate(); err != nil {
		t.Errorf("all three: %v", err)
	}
	bad := full
	bad.TrustedCAFile = full.KeyFile // not a certificate
	if _, err := New(Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", RaftListen: "127.0.0.1:0", PeerTLS: bad}); err == nil ||
		!strings.Contains(err.Error(), "peer tls") {
		t.Errorf("a CA file without certificates: %v, want a peer tls error", err)
	}
}

// With auth on and no peer TLS, a node warns that its peer port lets
// anyone who reaches it act in any principal's name; with peer TLS it does
// not, and a node of one still starts and serves.
func TestPlaintextPeerPortWarning(t *testing.T) {
	policy := writePolicy(t, testPolicy())
	for _, tc := range []struct {
		name string
		peer TLSFiles
		want bool
	}{
		{"auth without peer TLS", TLSFiles{}, true},
		{"auth with peer TLS", peerFiles(t, testpki.NewCA(t, "peers")), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf testutil.SyncBuffer
			newTestServer(t, Config{AuthFile: policy, PeerTLS: tc.peer, Logger: slog.New(slog.NewTextHandler(&buf, nil))})
			if got := strings.Contains(buf.String(), "the peer port is plaintext and unauthenticated"); got != tc.want {
				t.Errorf("warned %v, want %v; log:\n%s", got, tc.want, buf.String())
			}
		})
	}
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
