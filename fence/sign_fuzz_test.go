package fence_test

import (
	"errors"
	"testing"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/internal/signtest"
)

// FuzzVerify feeds signature verification arbitrary Fencing-Token-Signature
// values, scopes and tokens: it never panics, refuses with ErrBadSignature,
// and accepts exactly the one signature the trusted key makes for that
// scope and token. Seeds: testdata/fuzz/FuzzVerify.
func FuzzVerify(f *testing.F) {
	signer := signtest.NewSigner(f, "k1")
	v, err := fence.NewVerifier(signer.Public())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(signer.Sign("orders/7", 42), "orders/7", uint64(42))
	f.Add(signer.Sign("orders/7", 42), "orders/8", uint64(42))
	f.Add("k1.", "s", uint64(1))
	f.Add("k1", "s", uint64(1))
	f.Add(".k1.AAAA", "", uint64(0))
	f.Fuzz(func(t *testing.T, sig, scope string, token uint64) {
		err := v.Verify(scope, token, sig)
		if err != nil && !errors.Is(err, fence.ErrBadSignature) {
			t.Fatalf("undocumented error %v", err)
		}
		if want := signer.Sign(scope, token); (err == nil) != (sig == want) {
			t.Fatalf("Verify(%q, %d, %q) = %v; the valid signature is %q", scope, token, sig, err, want)
		}
	})
}
