// Package signtest checks that a guard wrapped by fence.NewSignedGuard
// refuses every token whose signature is missing or wrong before it can
// raise the highest token, and accepts signatures of a rotated-out key
// until the key's trust ends. Every guard's tests run it.
package signtest

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"testing"
	"time"

	"github.com/fencedio/fenced/fence"
)

// Keys are a signing setup after one rotation: Old signed until recently
// and stays trusted for an hour, New signs now.
type Keys struct {
	Old, New *fence.Signer
	Verifier *fence.Verifier
}

// NewSigner returns a signer with a fresh key.
func NewSigner(t testing.TB, kid string) *fence.Signer {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := fence.NewSigner(kid, priv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// NewKeys makes a rotated pair of keys and a verifier trusting both.
func NewKeys(t testing.TB) Keys {
	t.Helper()
	old, next := NewSigner(t, "k1"), NewSigner(t, "k2")
	oldPub := old.Public()
	oldPub.NotAfter = time.Now().Add(time.Hour)
	v, err := fence.NewVerifier(oldPub, next.Public())
	if err != nil {
		t.Fatal(err)
	}
	return Keys{Old: old, New: next, Verifier: v}
}

// Mutate makes one fenced mutation of scope with token; the signature is
// in ctx (fence.SignatureFrom). It reports whether the mutation was
// applied.
type Mutate func(ctx context.Context, scope string, token uint64) (bool, error)

// Check runs the refusals and the rotation against inner, a fresh guard,
// wrapped by fence.NewSignedGuard, on scope.
func Check(t *testing.T, inner fence.Guard, scope string) {
	t.Helper()
	CheckGuard(t, scope, func(v *fence.Verifier) Mutate {
		g := fence.NewSignedGuard(inner, v)
		return func(ctx context.Context, scope string, token uint64) (bool, error) {
			ran := false
			err := g.Do(ctx, scope, token, func(context.Context) error { ran = true; return nil })
			return ran, err
		}
	}, inner.Highest)
}

// CheckGuard runs the refusals and the rotation against a guard that
// newGuard builds around a verifier, all guards sharing one store whose
// highest token of a scope highest returns.
func CheckGuard(t *testing.T, scope string, newGuard func(*fence.Verifier) Mutate, highest func(context.Context, string) (uint64, error)) {
	t.Helper()
	keys := NewKeys(t)
	g := newGuard(keys.Verifier)
	present := func(m Mutate, token uint64, sig string) (bool, error) {
		return m(fence.WithSignature(context.Background(), sig), scope, token)
	}
	ctx := context.Background()
	if ran, err := present(g, 10, keys.New.Sign(scope, 10)); err != nil || !ran {
		t.Fatalf("signed token 10: ran %v, %v", ran, err)
	}
	// A token far above every legitimate one but still storable by every
	// guard: were it accepted, the highest would show it.
	const big = 1 << 62
	forger := NewSigner(t, "k2") // claims the trusted key's ID
	stranger := NewSigner(t, "k3")
	retired := keys.Old.Public()
	retired.NotAfter = time.Now().Add(-time.Second)
	retiredOnly, err := fence.NewVerifier(retired)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		g    Mutate
		sig  string
	}{
		{"unsigned", g, ""},
		{"forged under a trusted key ID", g, forger.Sign(scope, big)},
		{"signed by an unknown key", g, stranger.Sign(scope, big)},
		{"re-scoped", g, keys.New.Sign(scope+"-other", big)},
		{"signature of another token", g, keys.New.Sign(scope, 11)},
		{"malformed", g, "k2.not-base64!"},
		{"no key ID", g, "abc"},
		{"key retired", newGuard(retiredOnly), keys.Old.Sign(scope, big)},
	} {
		ran, err := present(tc.g, big, tc.sig)
		if ran || !errors.Is(err, fence.ErrBadSignature) {
			t.Errorf("%s: ran %v, %v; want ErrBadSignature", tc.name, ran, err)
		}
		if h, err := highest(ctx, scope); err != nil || h != 10 {
			t.Fatalf("%s: highest %d, %v; want 10", tc.name, h, err)
		}
	}
	// The rotated-out key stays trusted until its NotAfter.
	if ran, err := present(g, 12, keys.Old.Sign(scope, 12)); err != nil || !ran {
		t.Fatalf("token signed by the rotated-out key: ran %v, %v", ran, err)
	}
	if h, _ := highest(ctx, scope); h != 12 {
		t.Fatalf("highest %d after the old key's token 12", h)
	}
}
