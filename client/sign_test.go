package client_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencehttp"
	"github.com/fencedio/fenced/internal/fencedtest"
)

// unsigned hides a lease's signature.
type unsigned struct{ *client.Lease }

func (unsigned) Signature() string { return "" }

// A lease from a signing server carries its signature, and fencehttp's
// Transport presents it: a guard trusting the server's published keys
// accepts the lease's writes and refuses the same token unsigned.
func TestSignedLeaseThroughTransport(t *testing.T) {
	t.Parallel()
	seed := make([]byte, ed25519.SeedSize)
	rand.Read(seed)
	path := filepath.Join(t.TempDir(), "signing.json")
	if err := os.WriteFile(path, fmt.Appendf(nil, `{"active": "k1", "keys": [{"kid": "k1", "seed": %q}]}`,
		base64.StdEncoding.EncodeToString(seed)), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := fencedtest.Config(t)
	cfg.SigningKeyFile = path
	srv := fencedtest.StartConfig(t, cfg)
	resp, err := http.Get(srv.URL + "/v1/keys")
	if err != nil {
		t.Fatal(err)
	}
	keys, err := fence.ReadKeySet(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	v, err := fence.NewVerifier(keys...)
	if err != nil {
		t.Fatal(err)
	}
	guard := fence.NewMemory(fence.MemoryConfig{})
	resource := httptest.NewServer(fencehttp.Middleware(fence.NewSignedGuard(guard, v), fencehttp.Config{})(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })))
	defer resource.Close()

	l, err := srv.Client(t, client.Config{TTL: 5 * time.Second}).Acquire(context.Background(), "orders/7")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.Background())
	if l.Signature() == "" {
		t.Fatal("lease from a signing server has no signature")
	}
	put := func(lease fencehttp.Lease) int {
		req, _ := http.NewRequest(http.MethodPut, resource.URL, nil)
		resp, err := (&http.Client{Transport: fencehttp.NewTransport(lease, nil)}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := put(unsigned{l}); code != http.StatusForbidden {
		t.Fatalf("unsigned write answered %d, want 403", code)
	}
	if h, _ := guard.Highest(context.Background(), "orders/7"); h != 0 {
		t.Fatalf("highest %d after a refused write", h)
	}
	if code := put(l); code != http.StatusNoContent {
		t.Fatalf("signed write answered %d, want 204", code)
	}
	if h, _ := guard.Highest(context.Background(), "orders/7"); h != l.Token() {
		t.Fatalf("highest %d, want the lease's token %d", h, l.Token())
	}
}
