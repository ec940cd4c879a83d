package server

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
)

// With auth on, the endpoints meant for probes, scrapers and guards stay
// open (docs/security.md): /healthz, /metrics, /v1/role, /v1/stats,
// /v1/keys and the dashboard's page. None of them may name a key, an
// owner, a lease ID or a token.
func TestOpenEndpointsShowNoLeases(t *testing.T) {
	signing := filepath.Join(t.TempDir(), "signing.json")
	seed, _ := newSeed(t)
	if err := os.WriteFile(signing, fmt.Appendf(nil, `{"active": "k1", "keys": [{"kid": "k1", "seed": %q}]}`, seed), 0o600); err != nil {
		t.Fatal(err)
	}
	s, base := serveAPI(t, Config{AuthFile: writePolicy(t, testPolicy()), SigningKeyFile: signing})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	alice := newCaller(base, nil, aliceSecret)
	r, err := alice.lease.Acquire(ctx, connect.NewRequest(&fencedv1.AcquireRequest{Key: "a/very-secret-key", TtlMs: 60_000}))
	if err != nil {
		t.Fatal(err)
	}
	l := r.Msg.GetLease()
	secrets := []string{l.GetKey(), "very-secret", l.GetOwner(), l.GetLeaseId(), r.Msg.GetTokenSignature()}
	for _, path := range []string{"/healthz", "/metrics", "/v1/role", "/v1/stats", "/v1/keys", "/"} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s without credentials: %s, want it open", path, resp.Status)
		}
		for _, secret := range secrets {
			if secret != "" && strings.Contains(string(body), secret) {
				t.Errorf("%s shows %q", path, secret)
			}
		}
	}
	for path, want := range map[string]int{"/v1/events?prefix=a/": http.StatusUnauthorized, "/v1/backup": http.StatusUnauthorized} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("%s without credentials: %s, want %d", path, resp.Status, want)
		}
	}
}
