package fence_test

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/internal/signtest"
)

func TestSignedMemoryGuard(t *testing.T) {
	signtest.Check(t, fence.NewMemory(), "orders/7")
}

func TestSignedBoltGuard(t *testing.T) {
	b, err := fence.OpenBolt(filepath.Join(t.TempDir(), "fence.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	signtest.Check(t, b, "orders/7")
}

// A key set survives its JSON form, retirement included, and verifies what
// the keys signed.
func TestKeySetRoundTrip(t *testing.T) {
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
