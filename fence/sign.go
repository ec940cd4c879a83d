package fence

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// Signed tokens (opt-in). Anyone who reaches a resource can present any
// token, and one huge token accepted once makes every legitimate token of
// its scope stale forever. fenced can sign what it grants: an Ed25519
// signature over the key ID, the scope and the token, sent beside the token
// (Fencing-Token-Signature). A guard wrapped in NewSignedGuard refuses,
// before the token can raise the highest, every token whose signature is
// missing, malformed, made for another scope or token, or by a key it does
// not trust. Unsigned guards cost nothing and ignore signatures.

// ErrBadSignature is matched by every refusal of NewSignedGuard's guards:
// nothing is applied or recorded.
var ErrBadSignature = errors.New("missing or invalid fencing token signature")

// SignatureError says why a signature was refused; it matches
// ErrBadSignature.
type SignatureError struct {
	Scope  string
	Token  uint64
	KeyID  string // the key the signature names, if any
	Reason string
}

func (e *SignatureError) Error() string {
	return fmt.Sprintf("fencing token %d for scope %q: %s", e.Token, e.Scope, e.Reason)
}

// Is makes errors.Is(err, ErrBadSignature) true.
func (e *SignatureError) Is(target error) bool { return target == ErrBadSignature }

// signedMessage is what a signature covers: a domain label, then key ID
// and scope, each length-prefixed, then the token. The key ID is inside, so
// a signature cannot be passed off as another key's.
func signedMessage(keyID, scope string, token uint64) []byte {
	b := make([]byte, 0, 32+len(keyID)+len(scope))
	b = append(b, "fenced-token-v1\x00"...)
	b = binary.AppendUvarint(b, uint64(len(keyID)))
	b = append(b, keyID...)
	b = binary.AppendUvarint(b, uint64(len(scope)))
	b = append(b, scope...)
	return binary.BigEndian.AppendUint64(b, token)
}

// Signer signs grants with one Ed25519 key.
type Signer struct {
	keyID string
	key   ed25519.PrivateKey
}

// NewSigner returns a signer that names its signatures keyID.
func NewSigner(keyID string, key ed25519.PrivateKey) (*Signer, error) {
	if keyID == "" || strings.ContainsAny(keyID, ". \t") {
		return nil, fmt.Errorf("fence: key ID %q must be non-empty, without dots or spaces", keyID)
	}
	if len(key) != ed25519.PrivateKeySize {
		return nil, errors.New("fence: not an Ed25519 private key")
	}
	return &Signer{keyID: keyID, key: key}, nil
}

// KeyID names the signer's key.
func (s *Signer) KeyID() string { return s.keyID }

// Public returns the signer's public key.
func (s *Signer) Public() PublicKey {
	return PublicKey{KeyID: s.keyID, Key: s.key.Public().(ed25519.PublicKey)}
}

// Sign returns the signature of token for scope, as sent in
// Fencing-Token-Signature: the key ID, a dot, and the signature in
// unpadded base64url.
func (s *Signer) Sign(scope string, token uint64) string {
	sig := ed25519.Sign(s.key, signedMessage(s.keyID, scope, token))
	return s.keyID + "." + base64.RawURLEncoding.EncodeToString(sig)
}

// PublicKey is a key a guard trusts.
type PublicKey struct {
	KeyID string
	Key   ed25519.PublicKey
	// NotAfter, when set, ends the key's trust: a rotated-out key stays
	// trusted until the leases it signed have ended.
	NotAfter time.Time
}

// Verifier checks signatures against a set of trusted keys.
type Verifier struct {
	keys map[string]PublicKey
	now  func() time.Time
}

// NewVerifier trusts keys.
func NewVerifier(keys ...PublicKey) (*Verifier, error) {
	v := &Verifier{keys: make(map[string]PublicKey, len(keys)), now: time.Now}
	for _, k := range keys {
		if len(k.Key) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("fence: key %q is not an Ed25519 public key", k.KeyID)
		}
		if _, dup := v.keys[k.KeyID]; dup {
			return nil, fmt.Errorf("fence: key ID %q given twice", k.KeyID)
		}
		v.keys[k.KeyID] = k
	}
	return v, nil
}

// Verify returns nil if sig is a signature of token for scope by a trusted
// key, and a *SignatureError otherwise.
func (v *Verifier) Verify(scope string, token uint64, sig string) error {
	fail := func(kid, reason string) error {
		return &SignatureError{Scope: scope, Token: token, KeyID: kid, Reason: reason}
	}
	if sig == "" {
		return fail("", "no signature")
	}
	kid, enc, ok := strings.Cut(sig, ".")
	if !ok {
		return fail("", "signature is not KEYID.SIGNATURE")
	}
	k, ok := v.keys[kid]
	if !ok {
		return fail(kid, fmt.Sprintf("signed by unknown key %q", kid))
	}
	if !k.NotAfter.IsZero() && !v.now().Before(k.NotAfter) {
		return fail(kid, fmt.Sprintf("key %q retired at %s", kid, k.NotAfter.Format(time.RFC3339)))
	}
	raw, err := base64.RawURLEncoding.Strict().DecodeString(enc)
	if err != nil || len(raw) != ed25519.SignatureSize {
		return fail(kid, "signature is not 64 bytes of base64url")
	}
	if !ed25519.Verify(k.Key, signedMessage(kid, scope, token), raw) {
		return fail(kid, "signature does not match the scope and token")
	}
	return nil
}

type signatureKey struct{}

// WithSignature returns ctx carrying the signature presented with a token,
// for a signed guard's Do. The HTTP middleware and the Connect interceptor
// set it from Fencing-Token-Signature.
func WithSignature(ctx context.Context, sig string) context.Context {
	return context.WithValue(ctx, signatureKey{}, sig)
}

// SignatureFrom returns the signature WithSignature put in ctx.
func SignatureFrom(ctx context.Context) string {
	s, _ := ctx.Value(signatureKey{}).(string)
	return s
}

// NewSignedGuard returns a guard that runs g's Do only for tokens whose
// signature (SignatureFrom the context) v accepts; other tokens get a
// *SignatureError and never reach g, so they cannot raise its highest.
// Highest is g's.
func NewSignedGuard(g Guard, v *Verifier) Guard { return &signedGuard{g: g, v: v} }

type signedGuard struct {
	g Guard
	v *Verifier
}

func (s *signedGuard) Do(ctx context.Context, scope string, token uint64, apply func(ctx context.Context) error) error {
	if err := s.v.Verify(scope, token, SignatureFrom(ctx)); err != nil {
		return err
	}
	return s.g.Do(ctx, scope, token, apply)
}

func (s *signedGuard) Highest(ctx context.Context, scope string) (uint64, error) {
	return s.g.Highest(ctx, scope)
}

// jwk is one key of a key set document, in the shape of RFC 8037's OKP
// JSON Web Keys, with the end of its trust as "exp" (Unix seconds).
type jwk struct {
	Kty string `json:"kty"`
	Crv string `json:"crv"`
	Kid string `json:"kid"`
	X   string `json:"x"`
	Use string `json:"use,omitempty"`
	Exp int64  `json:"exp,omitempty"`
}

// WriteKeySet writes keys as a JWKS-like document: {"keys": [...]}.
func WriteKeySet(w io.Writer, keys []PublicKey) error {
	doc := struct {
		Keys []jwk `json:"keys"`
	}{Keys: make([]jwk, 0, len(keys))}
	for _, k := range keys {
		j := jwk{Kty: "OKP", Crv: "Ed25519", Kid: k.KeyID, X: base64.RawURLEncoding.EncodeToString(k.Key), Use: "sig"}
		if !k.NotAfter.IsZero() {
			j.Exp = k.NotAfter.Unix()
		}
		doc.Keys = append(doc.Keys, j)
	}
	return json.NewEncoder(w).Encode(doc)
}

// ReadKeySet parses a document written by WriteKeySet (fenced serves it at
// /v1/keys), for NewVerifier.
func ReadKeySet(r io.Reader) ([]PublicKey, error) {
	var doc struct {
		Keys []jwk `json:"keys"`
	}
	if err := json.NewDecoder(io.LimitReader(r, 1<<20)).Decode(&doc); err != nil {
		return nil, fmt.Errorf("fence: key set: %w", err)
	}
	keys := make([]PublicKey, 0, len(doc.Keys))
	for _, j := range doc.Keys {
		if j.Kty != "OKP" || j.Crv != "Ed25519" {
			continue // not a key fenced signs with
		}
		x, err := base64.RawURLEncoding.DecodeString(j.X)
		if err != nil || len(x) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("fence: key set: key %q is not an Ed25519 public key", j.Kid)
		}
		k := PublicKey{KeyID: j.Kid, Key: ed25519.PublicKey(x)}
		if j.Exp != 0 {
			k.NotAfter = time.Unix(j.Exp, 0)
		}
		keys = append(keys, k)
	}
	return keys, nil
}
