package main

import (
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/server"
	"github.com/fencedio/fenced/store"
	"github.com/spf13/cobra"
)

// registerSecurityFlags adds the TLS flags of the API and peer ports, named
// as etcd names them, the auth file and the signing keys.
func registerSecurityFlags(cmd *cobra.Command, cfg *server.Config) {
	f := cmd.Flags()
	f.StringVar(&cfg.TLS.CertFile, "cert-file", "", "TLS certificate of the API port (PEM); the port then speaks only TLS")
	f.StringVar(&cfg.TLS.KeyFile, "key-file", "", "private key of --cert-file (PEM)")
	f.StringVar(&cfg.TLS.TrustedCAFile, "trusted-ca-file", "", "CA certificates (PEM) that client certificates must chain to")
	f.BoolVar(&cfg.TLS.ClientCertAuth, "client-cert-auth", false, "require a client certificate from --trusted-ca-file on the API port")
	f.StringVar(&cfg.PeerTLS.CertFile, "peer-cert-file", "", "TLS certificate of this node on the peer port (PEM); with the two below, peer traffic is mutual TLS only")
	f.StringVar(&cfg.PeerTLS.KeyFile, "peer-key-file", "", "private key of --peer-cert-file (PEM)")
	f.StringVar(&cfg.PeerTLS.TrustedCAFile, "peer-trusted-ca-file", "", "CA certificates (PEM) that every node's peer certificate must chain to")
	f.StringVar(&cfg.SigningKeyFile, "signing-key-file", "", "Ed25519 keys (JSON) to sign every granted token with; public keys served on /v1/keys")
	f.StringVar(&cfg.AuthFile, "auth-file", "", "auth policy (JSON: token hashes and rules); turns authentication on, denying what no rule grants")
}

// reloadOnSIGHUP re-reads the TLS and auth files on every SIGHUP until the
// returned function is called. A file that fails to load is logged and
// keeps its previous contents.
func reloadOnSIGHUP(srv *server.Server) func() {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-hup:
				srv.Reload() // logs its outcome
			case <-done:
				return
			}
		}
	}()
	return func() { signal.Stop(hup); close(done) }
}

// loadVerifier reads a key set file, as served on /v1/keys.
func loadVerifier(path string) (*fence.Verifier, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--trusted-keys-file: %w", err)
	}
	defer f.Close()
	keys, err := fence.ReadKeySet(f)
	if err != nil {
		return nil, fmt.Errorf("--trusted-keys-file %s: %w", path, err)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("--trusted-keys-file %s: no Ed25519 keys", path)
	}
	return fence.NewVerifier(keys...)
}

// storeAuthorize lets a write of scope through the reference store only
// for a principal of pol with the acquire permission on it: whoever may
// hold the lease of a scope may write what it fences.
func storeAuthorize(pol *server.Policy) func(*http.Request, string) error {
	return func(r *http.Request, scope string) error {
		p, err := pol.Authenticate(r, time.Now())
		if err != nil {
			return fmt.Errorf("%w: %v", store.ErrUnauthenticated, err)
		}
		if !pol.Allowed(p.Name, server.PermAcquire, scope) {
			return fmt.Errorf("%w: principal %q has no acquire permission on scope %q", store.ErrForbidden, p.Name, scope)
		}
		return nil
	}
}
