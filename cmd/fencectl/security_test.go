package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/internal/fencedtest"
	"github.com/fencedio/fenced/internal/testpki"
	"github.com/fencedio/fenced/server"
)

// fencectl reaches a TLS server with --cacert and a token from
// FENCED_TOKEN or --cert/--key, and revoke ends another holder's lease.
func TestRevokeOverTLS(t *testing.T) {
	ca := testpki.NewCA(t, "fenced")
	leaf := ca.Server(t, "node1")
	const opsSecret = "ops-secret-0123456789abcdef0123456789"
	policy := filepath.Join(t.TempDir(), "auth.json")
	if err := os.WriteFile(policy, fmt.Appendf(nil, `{
  "tokens": [{"principal": "ops", "sha256": %q}],
  "rules": [{"principal": "ops", "prefix": "", "permissions": ["admin"]},
            {"principal": "worker", "prefix": "jobs/", "permissions": ["acquire", "renew", "read"]}]}`,
		server.HashSecret(opsSecret)), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := fencedtest.Config(t)
	cfg.TLS = server.TLSFiles{CertFile: leaf.CertFile, KeyFile: leaf.KeyFile, TrustedCAFile: ca.CertFile}
	cfg.AuthFile = policy
	srv := fencedtest.StartConfig(t, cfg)

	worker := ca.Client(t, "worker")
	tlsConf, err := client.TLSFiles{CAFile: ca.CertFile, CertFile: worker.CertFile, KeyFile: worker.KeyFile}.Config()
	if err != nil {
		t.Fatal(err)
	}
	c := srv.Client(t, client.Config{TLS: tlsConf, TTL: 5 * time.Second})
	l, err := c.Acquire(context.Background(), "jobs/1")
	if err != nil {
		t.Fatal(err)
	}

	// The worker's certificate reads but may not revoke.
	out, err := run(t, srv, "--cacert", ca.CertFile, "--cert", worker.CertFile, "--key", worker.KeyFile, "get", "jobs/1")
	if err != nil || !strings.Contains(out, "worker") {
		t.Fatalf("get with a client certificate: %v\n%s", err, out)
	}
	if _, err := run(t, srv, "--cacert", ca.CertFile, "--cert", worker.CertFile, "--key", worker.KeyFile, "revoke", "jobs/1"); !errors.Is(err, client.ErrPermissionDenied) {
		t.Fatalf("revoke by a worker: %v, want ErrPermissionDenied", err)
	}
	if _, err := run(t, srv, "--cacert", ca.CertFile, "revoke", "jobs/1"); !errors.Is(err, client.ErrUnauthenticated) {
		t.Fatalf("revoke without credentials: %v, want ErrUnauthenticated", err)
	}
	t.Setenv("FENCED_TOKEN", opsSecret)
	out, err = run(t, srv, "--cacert", ca.CertFile, "revoke", "jobs/1")
	if err != nil || !strings.Contains(out, "by ops") || !strings.Contains(out, itoa(l.Token())) {
		t.Fatalf("revoke: %v\n%s", err, out)
	}
	select {
	case <-l.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the revoked lease was never reported lost")
	}
}
