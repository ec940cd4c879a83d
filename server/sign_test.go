package server

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/fence"
)

func newSeed(t *testing.T) (string, ed25519.PrivateKey) {
	seed := make([]byte, ed25519.SeedSize)
	if _, err := rand.Read(seed); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(seed), ed25519.NewKeyFromSeed(seed)
}

func fetchKeys(t *testing.T, base string) *fence.Verifier {
	t.Helper()
	resp, err := http.Get(base + "/v1/keys")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	keys, err := fence.ReadKeySet(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	v, err := fence.NewVerifier(keys...)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// With a signing key file, Acquire, Renew and KeepAlive return a signature
// of the token for the key that verifies with the published keys; after a
// rotation and Reload, renewals are signed by the new key while the old
// key, still published until its notAfter, keeps verifying what it signed.
func TestTokenSigning(t *testing.T) {
	path := filepath.Join(t.TempDir(), "signing.json")
	seed1, priv1 := newSeed(t)
	if err := os.WriteFile(path, fmt.Appendf(nil, `{"active": "k1", "keys": [{"kid": "k1", "seed": %q}]}`, seed1), 0o600); err != nil {
		t.Fatal(err)
	}
	s, base := serveAPI(t, Config{SigningKeyFile: path})
	c := newCaller(base, nil, "")
	ctx := context.Background()
	r, err := c.lease.Acquire(ctx, connect.NewRequest(&fencedv1.AcquireRequest{Key: "orders/7", Owner: "A", TtlMs: 60_000}))
	if err != nil {
		t.Fatal(err)
	}
	l, sig := r.Msg.GetLease(), r.Msg.GetTokenSignature()
	if !strings.HasPrefix(sig, "k1.") {
		t.Fatalf("acquire signature %q, want one by k1", sig)
	}
	v1 := fetchKeys(t, base)
	if err := v1.Verify("orders/7", l.GetToken(), sig); err != nil {
		t.Fatalf("acquire signature: %v", err)
	}
	if err := v1.Verify("orders/8", l.GetToken(), sig); err == nil {
		t.Fatal("signature verified for another key")
	}

	// Rotate: k2 signs, k1 stays published (public key only) for an hour.
	seed2, _ := newSeed(t)
	pub1 := base64.StdEncoding.EncodeToString(priv1.Public().(ed25519.PublicKey))
	notAfter := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	if err := os.WriteFile(path, fmt.Appendf(nil, `{"active": "k2", "keys": [{"kid": "k2", "seed": %q}, {"kid": "k1", "public": %q, "notAfter": %q}]}`,
		seed2, pub1, notAfter), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	rr, err := c.lease.Renew(ctx, connect.NewRequest(&fencedv1.RenewRequest{Key: "orders/7", LeaseId: l.GetLeaseId()}))
	if err != nil {
		t.Fatal(err)
	}
	sig2 := rr.Msg.GetTokenSignature()
	if !strings.HasPrefix(sig2, "k2.") {
		t.Fatalf("renew signature after rotation %q, want one by k2", sig2)
	}
	v2 := fetchKeys(t, base)
	for _, sg := range []string{sig, sig2} {
		if err := v2.Verify("orders/7", l.GetToken(), sg); err != nil {
			t.Fatalf("after rotation, %q: %v", sg, err)
		}
	}
	ka := newH2CCaller(base, "").lease.KeepAlive(ctx)
	defer ka.CloseResponse()
	if err := ka.Send(&fencedv1.KeepAliveRequest{Key: "orders/7", LeaseId: l.GetLeaseId()}); err != nil {
		t.Fatal(err)
	}
	kr, err := ka.Receive()
	if err != nil || v2.Verify("orders/7", l.GetToken(), kr.GetTokenSignature()) != nil {
		t.Fatalf("keepalive: %v, signature %q", err, kr.GetTokenSignature())
	}

	// A broken key file keeps the keys in force.
	if err := os.WriteFile(path, []byte(`{"active": "k3", "keys": []}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(); err == nil {
		t.Fatal("reload of a key file without the active key succeeded")
	}
	if got := s.signature("orders/7", l.GetToken()); got == nil || *got != sig2 {
		t.Fatalf("after a failed reload signed %v, want %q", got, sig2)
	}
}

// Unsigned mode is the default: no signature, and no keys published.
func TestNoSigningByDefault(t *testing.T) {
	_, base := serveAPI(t, Config{})
	r, err := newCaller(base, nil, "").lease.Acquire(context.Background(), connect.NewRequest(&fencedv1.AcquireRequest{Key: "k", Owner: "A", TtlMs: 60_000}))
	if err != nil || r.Msg.GetTokenSignature() != "" {
		t.Fatalf("acquire: %v, signature %q", err, r.Msg.GetTokenSignature())
	}
	resp, err := http.Get(base + "/v1/keys")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("/v1/keys answered %d, want 404", resp.StatusCode)
	}
}
