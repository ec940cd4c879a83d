package fence_test

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencebolt"
	"github.com/fencedio/fenced/internal/signtest"
)

func TestSignedMemoryGuard(t *testing.T) {
	t.Parallel()
	signtest.Check(t, fence.NewMemory(fence.MemoryConfig{}), "orders/7")
}

func TestSignedBoltGuard(t *testing.T) {
	t.Parallel()
	b, err := fencebolt.Open(filepath.Join(t.TempDir(), "fence.db"), fencebolt.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	signtest.Check(t, b, "orders/7")
}

// A key set survives its JSON form, retirement included, and verifies what
// the keys signed.
func TestKeySetRoundTrip(t *testing.T) {
	t.Parallel()
	keys := signtest.NewKeys(t)
	var buf bytes.Buffer
	if err := fence.WriteKeySet(&buf, []fence.PublicKey{keys.New.Public(), keys.Old.Public()}); err != nil {
		t.Fatal(err)
	}
	got, err := fence.ReadKeySet(&buf)
	if err != nil || len(got) != 2 || got[0].KeyID != "k2" || !got[0].Key.Equal(keys.New.Public().Key) {
		t.Fatalf("read %+v, %v", got, err)
	}
	v, err := fence.NewVerifier(got...)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Verify("s", 5, keys.New.Sign("s", 5)); err != nil {
		t.Fatal(err)
	}
	if err := v.Verify("s", 6, keys.New.Sign("s", 5)); err == nil {
		t.Fatal("signature of token 5 verified for token 6")
	}
}

// The last base64url character of a signature carries 2 bits of it and 4
// of padding; a copy differing only in the padding decodes to the same
// bytes unless decoding is strict, and must not verify.
func TestSignatureHasOneEncoding(t *testing.T) {
	t.Parallel()
	keys := signtest.NewKeys(t)
	sig := keys.New.Sign("s", 9)
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	i := strings.IndexByte(alphabet, sig[len(sig)-1])
	alt := sig[:len(sig)-1] + string(alphabet[i^1])
	if err := keys.Verifier.Verify("s", 9, alt); err == nil {
		t.Fatalf("%q verified as well as %q", alt, sig)
	}
}
