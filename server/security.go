package server

import (
	"net/http"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/server/internal/security"
)

// The security types of Config and of fenced's commands, defined in
// internal/security.
type (
	// TLSFiles names a certificate, its key and the CA that verifies
	// clients.
	TLSFiles = security.TLSFiles
	// TLSReloader serves a certificate that Reload reads again.
	TLSReloader = security.TLSReloader
	// Policy is a parsed auth file.
	Policy = security.Policy
	// Permission is a set of permissions.
	Permission = security.Permission
)

// Permissions; see security.Permission.
const (
	PermAcquire = security.PermAcquire
	PermRenew   = security.PermRenew
	PermRead    = security.PermRead
	PermWatch   = security.PermWatch
	PermOwner   = security.PermOwner
	PermAdmin   = security.PermAdmin
	PermReport  = security.PermReport
)

// NewTLSReloader reads the certificate files.
func NewTLSReloader(files TLSFiles) (*TLSReloader, error) { return security.NewTLSReloader(files) }

// LoadPolicy reads the auth file at path.
func LoadPolicy(path string) (*Policy, error) { return security.LoadPolicy(path) }

// ParsePolicy parses the contents of an auth file.
func ParsePolicy(b []byte) (*Policy, error) { return security.ParsePolicy(b) }

// HashSecret returns what an auth file stores for a bearer token secret.
func HashSecret(secret string) string { return security.HashSecret(secret) }

// Reload re-reads the TLS certificate files of the API and the peer port,
// the auth file and the signing key file (fenced does on SIGHUP). New handshakes and requests use them; a file that fails to
// load keeps its old contents, and the error says which.
func (s *Server) Reload() error {
	err := s.sec.Reload()
	if err != nil {
		s.log.Error("reload failed; keeping the previous files", "err", err)
	} else {
		s.log.Info("reloaded TLS and auth files")
	}
	return err
}

// signature returns the signature of token for key, nil with signing off:
// the field is then absent from the answer, which keeps the JSON of
// unsigned mode exactly as it was.
func (s *Server) signature(key string, token uint64) *string {
	kr := s.sec.Keys()
	if kr == nil {
		return nil
	}
	sig := kr.Sign(key, token)
	return &sig
}

// serveKeys publishes the keys guards should trust, JWKS-like (see
// fence.WriteKeySet); 404 with signing off.
func (s *Server) serveKeys(w http.ResponseWriter, _ *http.Request) {
	kr := s.sec.Keys()
	if kr == nil {
		http.Error(w, "token signing is off", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "max-age=60")
	fence.WriteKeySet(w, kr.Published())
}
