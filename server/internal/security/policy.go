package security

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// Permission is a set of operations a rule grants on a key prefix.
type Permission uint8

const (
	// PermAcquire allows Acquire.
	PermAcquire Permission = 1 << iota
	// PermRenew allows Renew, KeepAlive and Release of the principal's own
	// leases.
	PermRenew
	// PermRead allows Get and List.
	PermRead
	// PermWatch allows Watch.
	PermWatch
	// PermOwner allows an Acquire to name an owner other than the principal,
	// and renewing or releasing leases whose owner is not the principal:
	// whoever may claim any name may act for any holder.
	PermOwner
	// PermAdmin allows everything above and the AdminService (Revoke).
	PermAdmin
	// PermReport allows reporting stale rejections of the keys' scopes
	// (RejectionService.ReportRejections): what a resource's reporter needs,
	// and nothing else.
	PermReport

	permAll = PermAcquire | PermRenew | PermRead | PermWatch | PermOwner | PermAdmin | PermReport
)

var permNames = map[string]Permission{
	"acquire": PermAcquire, "renew": PermRenew, "read": PermRead, "watch": PermWatch,
	"owner": PermOwner, "admin": PermAdmin, "report": PermReport,
}

func (p Permission) String() string {
	var names []string
	for _, n := range []string{"acquire", "renew", "read", "watch", "owner", "admin", "report"} {
		if p&permNames[n] != 0 {
			names = append(names, n)
		}
	}
	return strings.Join(names, ",")
}

// AnyPrincipal in a rule grants its permissions to every authenticated
// principal.
const AnyPrincipal = "*"

// Principal is an authenticated caller.
type Principal struct {
	// Name is what rules and lease owners refer to: the name of a bearer
	// token, or the identity of a client certificate (its subject CN, or
	// when that is empty its first DNS, URI or email SAN).
	Name string
	// Method is "token" or "certificate"; "none" when auth is off.
	Method string
}

// Anonymous is the principal of every request while auth is off. It names
// revocations in the log.
var Anonymous = Principal{Name: "anonymous", Method: "none"}

var (
	// ErrUnauthenticated: no credentials, or ones that match no principal.
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrPermissionDenied: an authenticated principal without the
	// permission the request needs.
	ErrPermissionDenied = errors.New("permission denied")
)

// DeniedError says which permission a principal lacked on which key; it
// matches ErrPermissionDenied.
type DeniedError struct {
	Principal string
	Need      Permission
	Key       string
	Reason    string // when set, why the permission did not suffice
}

func (e *DeniedError) Error() string {
	if e.Reason != "" {
		return fmt.Sprintf("permission denied: %s", e.Reason)
	}
	return fmt.Sprintf("permission denied: principal %q has no %s permission on %q", e.Principal, e.Need, e.Key)
}

func (e *DeniedError) Is(target error) bool { return target == ErrPermissionDenied }

// Rule grants Principal the permissions Perms on every key starting with
// Prefix.
type Rule struct {
	Principal string
	Prefix    string
	Perms     Permission
}

// Policy is the parsed auth file: who can authenticate, and what each
// principal may do. Everything not granted is denied.
type Policy struct {
	tokens map[[sha256.Size]byte]tokenEntry // by SHA-256 of the secret
	rules  []Rule
}

// policyFile is the JSON form of a Policy:
//
//	{
//	  "tokens": [{"principal": "billing", "sha256": "<64 hex digits>"}],
//	  "rules":  [{"principal": "billing", "prefix": "billing/",
//	              "permissions": ["acquire", "renew", "read", "watch"]}]
//	}
//
// Token secrets are stored as their SHA-256 only. A fast hash is enough
// because the secrets are not passwords: they must be random and at least
// 128 bits (fencectl token new makes 256), which no offline guessing can
// search, whereas bcrypt or argon2 exist to slow down guessing of
// low-entropy passwords and would cost every request tens of milliseconds
// of CPU. (Neither is in this module's dependencies either.)
//
// A token with "expires" (RFC 3339) stops authenticating at that time.
type policyFile struct {
	Tokens []struct {
		Principal string    `json:"principal"`
		SHA256    string    `json:"sha256"`
		Expires   time.Time `json:"expires"`
	} `json:"tokens"`
	Rules []struct {
		Principal   string   `json:"principal"`
		Prefix      string   `json:"prefix"`
		Permissions []string `json:"permissions"`
	} `json:"rules"`
}

// ErrBadPolicy is returned for an auth file that cannot be used.
var ErrBadPolicy = errors.New("bad auth file")

// LoadPolicy reads an auth file.
func LoadPolicy(path string) (*Policy, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadPolicy, err)
	}
	p, err := ParsePolicy(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// ParsePolicy parses the JSON of an auth file (see policyFile).
func ParsePolicy(b []byte) (*Policy, error) {
	var f policyFile
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadPolicy, err)
	}
	p := &Policy{tokens: make(map[[sha256.Size]byte]tokenEntry)}
	for i, t := range f.Tokens {
		var h [sha256.Size]byte
		if n, err := hex.Decode(h[:], []byte(t.SHA256)); err != nil || n != sha256.Size || len(t.SHA256) != 2*sha256.Size {
			return nil, fmt.Errorf("%w: token %d: sha256 must be 64 hex digits", ErrBadPolicy, i)
		}
		if t.Principal == "" || t.Principal == AnyPrincipal {
			return nil, fmt.Errorf("%w: token %d: principal must be a name", ErrBadPolicy, i)
		}
		if prev, dup := p.tokens[h]; dup {
			return nil, fmt.Errorf("%w: token %d: same secret as principal %q's", ErrBadPolicy, i, prev.principal)
		}
		p.tokens[h] = tokenEntry{principal: t.Principal, expires: t.Expires}
	}
	for i, r := range f.Rules {
		if r.Principal == "" {
			return nil, fmt.Errorf("%w: rule %d: principal is required", ErrBadPolicy, i)
		}
		var perms Permission
		for _, n := range r.Permissions {
			perm, ok := permNames[n]
			if !ok {
				return nil, fmt.Errorf("%w: rule %d: unknown permission %q (acquire, renew, read, watch, owner, admin, report)", ErrBadPolicy, i, n)
			}
			perms |= perm
		}
		if perms&PermAdmin != 0 {
			perms = permAll
		}
		p.rules = append(p.rules, Rule{Principal: r.Principal, Prefix: r.Prefix, Perms: perms})
	}
	return p, nil
}

// HashSecret returns what an auth file stores for a bearer token secret.
func HashSecret(secret string) string {
	h := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(h[:])
}

type tokenEntry struct {
	principal string
	expires   time.Time // zero: never
}

// tokenPrincipal returns the principal a bearer secret authenticates at
// now. The lookup is by hash, so its timing tells nothing about the secret.
func (p *Policy) tokenPrincipal(secret string, now time.Time) (string, error) {
	e, ok := p.tokens[sha256.Sum256([]byte(secret))]
	switch {
	case !ok:
		return "", fmt.Errorf("%w: the bearer token matches no principal", ErrUnauthenticated)
	case !e.expires.IsZero() && !now.Before(e.expires):
		return "", fmt.Errorf("%w: the bearer token of %q expired at %s", ErrUnauthenticated, e.principal, e.expires.Format(time.RFC3339))
	}
	return e.principal, nil
}

// allowed reports whether principal may do need on every key starting with
// prefix: some rule of the principal (or of "*") whose prefix is a prefix of
// it grants need. For a single key, prefix is the key.
func (p *Policy) allowed(principal string, need Permission, prefix string) bool {
	for _, r := range p.rules {
		if (r.Principal == principal || r.Principal == AnyPrincipal) && r.Perms&need == need && strings.HasPrefix(prefix, r.Prefix) {
			return true
		}
	}
	return false
}

// certPrincipal names the holder of a verified client certificate.
func certPrincipal(c *x509.Certificate) string {
	switch {
	case c.Subject.CommonName != "":
		return c.Subject.CommonName
	case len(c.DNSNames) > 0:
		return c.DNSNames[0]
	case len(c.URIs) > 0:
		return c.URIs[0].String()
	case len(c.EmailAddresses) > 0:
		return c.EmailAddresses[0]
	}
	return ""
}

// Authenticate identifies the caller of r at now: from its bearer token
// (Authorization: Bearer SECRET) or, without one, from its verified client
// certificate. Errors match ErrUnauthenticated.
func (p *Policy) Authenticate(r *http.Request, now time.Time) (Principal, error) {
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, secret, ok := strings.Cut(h, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") {
			return Principal{}, fmt.Errorf("%w: the Authorization header is not a bearer token", ErrUnauthenticated)
		}
		name, err := p.tokenPrincipal(strings.TrimSpace(secret), now)
		if err != nil {
			return Principal{}, err
		}
		return Principal{Name: name, Method: "token"}, nil
	}
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
		if name := certPrincipal(r.TLS.VerifiedChains[0][0]); name != "" {
			return Principal{Name: name, Method: "certificate"}, nil
		}
		return Principal{}, fmt.Errorf("%w: the client certificate names no subject", ErrUnauthenticated)
	}
	return Principal{}, fmt.Errorf("%w: no bearer token and no verified client certificate", ErrUnauthenticated)
}

// Allowed reports whether principal may do need on every key starting
// with prefix.
func (p *Policy) Allowed(principal string, need Permission, prefix string) bool {
	return p.allowed(principal, need, prefix)
}

// ForwardedPrincipalHeader names the principal a follower authenticated
// when it forwards a call to the leader: "METHOD:NAME", NAME path-escaped.
// Forwarded calls carry no credentials of their own; the leader trusts the
// header only on calls that reach it over the peer port, and the public
// port drops it, so a client cannot claim a principal by sending it.
const ForwardedPrincipalHeader = "Fenced-Forwarded-Principal"

// EncodePrincipal is the value of ForwardedPrincipalHeader for p.
func EncodePrincipal(p Principal) string { return p.Method + ":" + url.PathEscape(p.Name) }

// DecodePrincipal parses a ForwardedPrincipalHeader value.
func DecodePrincipal(v string) (Principal, error) {
	method, esc, ok := strings.Cut(v, ":")
	name, err := url.PathUnescape(esc)
	if !ok || err != nil || name == "" || method == "" {
		return Principal{}, fmt.Errorf("%w: malformed forwarded principal", ErrUnauthenticated)
	}
	return Principal{Name: name, Method: method}, nil
}
