package client_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/internal/fencedtest"
	"github.com/fencedio/fenced/internal/testpki"
	"github.com/fencedio/fenced/server"
)

// A client over TLS with a bearer token or a client certificate acquires
// and renews (HTTP/2 KeepAlive over TLS); without credentials it is refused
// with ErrUnauthenticated; an admin's Revoke ends the holder's lease, which
// the holder sees as lost.
func TestTLSAndCredentials(t *testing.T) {
	t.Parallel()
	ca := testpki.NewCA(t, "fenced")
	leaf := ca.Server(t, "node1")
	const appSecret, opsSecret = "app-secret-0123456789abcdef0123456789", "ops-secret-0123456789abcdef0123456789"
	policy := filepath.Join(t.TempDir(), "auth.json")
	if err := os.WriteFile(policy, fmt.Appendf(nil, `{
  "tokens": [{"principal": "app", "sha256": %q}, {"principal": "ops", "sha256": %q}],
  "rules": [
    {"principal": "app", "prefix": "jobs/", "permissions": ["acquire", "renew", "read", "watch"]},
    {"principal": "svc", "prefix": "svc/", "permissions": ["acquire", "renew"]},
    {"principal": "ops", "prefix": "", "permissions": ["admin"]}
  ]}`, server.HashSecret(appSecret), server.HashSecret(opsSecret)), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := fencedtest.Config(t)
	cfg.TLS = server.TLSFiles{CertFile: leaf.CertFile, KeyFile: leaf.KeyFile, TrustedCAFile: ca.CertFile}
	cfg.AuthFile = policy
	srv := fencedtest.StartConfig(t, cfg)
	ctx := context.Background()

	newClient := func(files client.TLSFiles, token string) *client.Client {
		tlsConf, err := files.Config()
		if err != nil {
			t.Fatal(err)
		}
		return srv.Client(t, client.Config{TLS: tlsConf, Token: token, TTL: 3 * time.Second})
	}
	app := newClient(client.TLSFiles{CAFile: ca.CertFile}, appSecret)
	l, err := app.Acquire(ctx, "jobs/1")
	if err != nil {
		t.Fatal(err)
	}
	if l.Owner() != "app" {
		t.Fatalf("owner %q, want the principal app", l.Owner())
	}
	// The KeepAlive stream (HTTP/2 over TLS) renews it: the local deadline
	// moves on.
	first := l.Deadline()
	for !l.Deadline().After(first) {
		select {
		case <-l.Done():
			t.Fatalf("lease lost instead of renewed over TLS: %v", l.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}

	svcCert := ca.Client(t, "svc")
	svc := newClient(client.TLSFiles{CAFile: ca.CertFile, CertFile: svcCert.CertFile, KeyFile: svcCert.KeyFile}, "")
	if l, err := svc.Acquire(ctx, "svc/1"); err != nil || l.Owner() != "svc" {
		t.Fatalf("acquire with a client certificate: %v", err)
	}
	if _, err := svc.Acquire(ctx, "jobs/2"); !errors.Is(err, client.ErrPermissionDenied) {
		t.Fatalf("acquire outside the prefix: %v, want ErrPermissionDenied", err)
	}
	anon := newClient(client.TLSFiles{CAFile: ca.CertFile}, "")
	if _, err := anon.Acquire(ctx, "jobs/2"); !errors.Is(err, client.ErrUnauthenticated) {
		t.Fatalf("acquire without credentials: %v, want ErrUnauthenticated", err)
	}
	if _, _, err := app.Revoke(ctx, "jobs/1"); !errors.Is(err, client.ErrPermissionDenied) {
		t.Fatalf("revoke without admin: %v, want ErrPermissionDenied", err)
	}

	ops := newClient(client.TLSFiles{CAFile: ca.CertFile}, opsSecret)
	info, by, err := ops.Revoke(ctx, "jobs/1")
	if err != nil || by != "ops" || info.Token != l.Token() {
		t.Fatalf("revoke: %+v %q %v", info, by, err)
	}
	select {
	case <-l.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the revoked lease was never reported lost")
	}
	if !errors.Is(l.Err(), client.ErrLost) || !errors.Is(l.Err(), client.ErrNotHeld) {
		t.Fatalf("revoked lease ended with %v, want ErrLost", l.Err())
	}
}
