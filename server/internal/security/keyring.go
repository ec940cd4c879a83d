package security

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/fencedio/fenced/fence"
)

// Keyring is the parsed signing key file: the key grants are signed with,
// and every key guards should trust.
type Keyring struct {
	signer    *fence.Signer
	published []fence.PublicKey
}

// signingFile is the JSON form of a Keyring:
//
//	{
//	  "active": "2026-12",
//	  "keys": [
//	    {"kid": "2026-12", "seed": "<base64 of a 32-byte Ed25519 seed>"},
//	    {"kid": "2026-11", "public": "<base64 of the public key>",
//	     "notAfter": "2026-12-08T00:00:00Z"}
//	  ]
//	}
//
// Grants are signed with the active key, which needs its seed. Every key is
// published on /v1/keys; rotate by adding a new key, making it active, and
// keeping the old one (its seed may go) with a notAfter later than the end
// of the last lease it signed.
type signingFile struct {
	Active string `json:"active"`
	Keys   []struct {
		Kid      string    `json:"kid"`
		Seed     string    `json:"seed"`
		Public   string    `json:"public"`
		NotAfter time.Time `json:"notAfter"`
	} `json:"keys"`
}

// ErrBadSigningKeys is returned for a signing key file that cannot be used.
var ErrBadSigningKeys = errors.New("bad signing key file")

func loadKeyring(path string) (*Keyring, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadSigningKeys, err)
	}
	var f signingFile
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrBadSigningKeys, path, err)
	}
	kr := &Keyring{}
	for _, k := range f.Keys {
		pub := fence.PublicKey{KeyID: k.Kid, NotAfter: k.NotAfter}
		switch {
		case k.Seed != "":
			seed, err := base64.StdEncoding.DecodeString(k.Seed)
			if err != nil || len(seed) != ed25519.SeedSize {
				return nil, fmt.Errorf("%w: key %q: seed must be %d bytes of base64", ErrBadSigningKeys, k.Kid, ed25519.SeedSize)
			}
			priv := ed25519.NewKeyFromSeed(seed)
			pub.Key = priv.Public().(ed25519.PublicKey)
			if k.Kid == f.Active {
				if kr.signer, err = fence.NewSigner(k.Kid, priv); err != nil {
					return nil, fmt.Errorf("%w: %w", ErrBadSigningKeys, err)
				}
			}
		case k.Public != "":
			x, err := base64.StdEncoding.DecodeString(k.Public)
			if err != nil || len(x) != ed25519.PublicKeySize {
				return nil, fmt.Errorf("%w: key %q: public must be %d bytes of base64", ErrBadSigningKeys, k.Kid, ed25519.PublicKeySize)
			}
			pub.Key = ed25519.PublicKey(x)
		default:
			return nil, fmt.Errorf("%w: key %q has neither seed nor public", ErrBadSigningKeys, k.Kid)
		}
		kr.published = append(kr.published, pub)
	}
	if kr.signer == nil {
		return nil, fmt.Errorf("%w: active key %q is not a key with a seed", ErrBadSigningKeys, f.Active)
	}
	// The same checks a guard makes, so that what is published is usable.
	if _, err := fence.NewVerifier(kr.published...); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadSigningKeys, err)
	}
	return kr, nil
}

// Sign signs token for key with the active key.
func (k *Keyring) Sign(key string, token uint64) string { return k.signer.Sign(key, token) }

// Published returns every key guards should trust.
func (k *Keyring) Published() []fence.PublicKey { return k.published }
