package server

import (
	"context"
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

	"connectrpc.com/connect"
	"github.com/fencedio/fenced/lease"
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

// anyPrincipal in a rule grants its permissions to every authenticated
// principal.
const anyPrincipal = "*"

// Principal is an authenticated caller.
type Principal struct {
	// Name is what rules and lease owners refer to: the name of a bearer
	// token, or the identity of a client certificate (its subject CN, or
	// when that is empty its first DNS, URI or email SAN).
	Name string
	// Method is "token" or "certificate"; "none" when auth is off.
	Method string
}

// anonymous is the principal of every request while auth is off. It names
// revocations in the log.
var anonymous = Principal{Name: "anonymous", Method: "none"}

var (
	// errUnauthenticated: no credentials, or ones that match no principal.
	errUnauthenticated = errors.New("unauthenticated")
	// errPermissionDenied: an authenticated principal without the
	// permission the request needs.
	errPermissionDenied = errors.New("permission denied")
)

// DeniedError says which permission a principal lacked on which key; it
// matches errPermissionDenied.
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

func (e *DeniedError) Is(target error) bool { return target == errPermissionDenied }

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
		if t.Principal == "" || t.Principal == anyPrincipal {
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
		return "", fmt.Errorf("%w: the bearer token matches no principal", errUnauthenticated)
	case !e.expires.IsZero() && !now.Before(e.expires):
		return "", fmt.Errorf("%w: the bearer token of %q expired at %s", errUnauthenticated, e.principal, e.expires.Format(time.RFC3339))
	}
	return e.principal, nil
}

// allowed reports whether principal may do need on every key starting with
// prefix: some rule of the principal (or of "*") whose prefix is a prefix of
// it grants need. For a single key, prefix is the key.
func (p *Policy) allowed(principal string, need Permission, prefix string) bool {
	for _, r := range p.rules {
		if (r.Principal == principal || r.Principal == anyPrincipal) && r.Perms&need == need && strings.HasPrefix(prefix, r.Prefix) {
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
			return Principal{}, fmt.Errorf("%w: the Authorization header is not a bearer token", errUnauthenticated)
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
		return Principal{}, fmt.Errorf("%w: the client certificate names no subject", errUnauthenticated)
	}
	return Principal{}, fmt.Errorf("%w: no bearer token and no verified client certificate", errUnauthenticated)
}

// Allowed reports whether principal may do need on every key starting
// with prefix.
func (p *Policy) Allowed(principal string, need Permission, prefix string) bool {
	return p.allowed(principal, need, prefix)
}

// ErrUnauthenticated is matched by Authenticate's errors.
var ErrUnauthenticated = errUnauthenticated

// authResult is what authenticate found for a request, carried in its
// context to the interceptor and handlers.
type authResult struct {
	p   Principal
	err error
}

type authKey struct{}

// forwardedPrincipalHeader names the principal a follower authenticated
// when it forwards a call to the leader: "METHOD:NAME", NAME path-escaped.
// Forwarded calls carry no credentials of their own; the leader trusts the
// header only on calls that reach it over the peer port, and the public
// port drops it, so a client cannot claim a principal by sending it.
const forwardedPrincipalHeader = "Fenced-Forwarded-Principal"

// encodePrincipal is the value of forwardedPrincipalHeader for p.
func encodePrincipal(p Principal) string { return p.Method + ":" + url.PathEscape(p.Name) }

// decodePrincipal parses a forwardedPrincipalHeader value.
func decodePrincipal(v string) (Principal, error) {
	method, esc, ok := strings.Cut(v, ":")
	name, err := url.PathUnescape(esc)
	if !ok || err != nil || name == "" || method == "" {
		return Principal{}, fmt.Errorf("%w: malformed forwarded principal", errUnauthenticated)
	}
	return Principal{Name: name, Method: method}, nil
}

// authenticate identifies the caller of every API request, from a bearer
// token or else a verified client certificate, and passes the outcome on in
// the request's context. It refuses nothing itself: the interceptor answers
// in the RPC protocol the client speaks.
//
// On the peer port (peer true) a call another node forwarded names the
// principal that node authenticated (forwardedPrincipalHeader), which is
// taken as is, and another node's relay of rejections is relayPrincipal. On
// the public port both headers are removed before anything reads them.
func (s *Server) authenticate(next http.Handler, peer bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fwd := r.Header.Get(forwardedPrincipalHeader)
		if !peer {
			r.Header.Del(forwardedPrincipalHeader)
			r.Header.Del(relayHeader)
			fwd = ""
		}
		pol := s.sec.policy()
		if pol == nil {
			next.ServeHTTP(w, r)
			return
		}
		var res authResult
		switch {
		case fwd != "":
			res.p, res.err = decodePrincipal(fwd)
		case r.Header.Get(relayHeader) != "": // only on the peer port
			res.p = relayPrincipal
		default:
			res.p, res.err = pol.Authenticate(r, time.Now())
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), authKey{}, res)))
	})
}

// forwardPrincipal sets on h, the headers of a call this node forwards to
// the leader, the principal ctx's caller authenticated as here. Nothing
// while auth is off.
func (s *Server) forwardPrincipal(ctx context.Context, h http.Header) {
	if s.sec.policy() == nil {
		return
	}
	if res, ok := ctx.Value(authKey{}).(authResult); ok && res.err == nil {
		h.Set(forwardedPrincipalHeader, encodePrincipal(res.p))
	}
}

// principal returns the caller of ctx's request, errUnauthenticated if
// authentication failed, and anonymous while auth is off.
func (s *Server) principal(ctx context.Context) (Principal, error) {
	if s.sec.policy() == nil {
		return anonymous, nil
	}
	res, ok := ctx.Value(authKey{}).(authResult)
	if !ok {
		return Principal{}, fmt.Errorf("%w: request did not pass authentication", errUnauthenticated)
	}
	return res.p, res.err
}

// authorize returns the caller of ctx if it may do need on prefix (a key,
// or a prefix of keys for List and Watch).
func (s *Server) authorize(ctx context.Context, need Permission, prefix string) (Principal, error) {
	p, err := s.principal(ctx)
	if err != nil {
		return Principal{}, err
	}
	if pol := s.sec.policy(); pol != nil && !pol.allowed(p.Name, need, prefix) {
		return Principal{}, &DeniedError{Principal: p.Name, Need: need, Key: prefix}
	}
	return p, nil
}

// may reports whether p may do need on key; always while auth is off.
func (s *Server) may(p Principal, need Permission, key string) bool {
	pol := s.sec.policy()
	return pol == nil || pol.allowed(p.Name, need, key)
}

// authorizeHolder checks that p may renew or release lease id of key: its
// own lease (owner is the principal), or any with the owner permission. A
// lease that is not current passes, to be answered NOT_FOUND as without
// auth.
func (s *Server) authorizeHolder(p Principal, key, id string) error {
	if s.sec.policy() == nil {
		return nil
	}
	owner, ok := s.leaseOwner(key, id)
	if !ok || owner == p.Name || s.may(p, PermOwner, key) {
		return nil
	}
	return &DeniedError{Principal: p.Name, Need: PermOwner, Key: key,
		Reason: fmt.Sprintf("lease of %q is held by %q, not by principal %q", key, owner, p.Name)}
}

// acquireOwner is the owner an acquisition by p records: the principal
// itself, whatever the request says, unless p has the owner permission on
// key and names an owner. Clients send an owner of their own making
// (hostname/pid by default), so replacing it rather than refusing keeps
// them working once auth is turned on, and whoever reads the lease sees who
// really holds it.
func (s *Server) acquireOwner(p Principal, key, asked string) string {
	if s.sec.policy() == nil || asked == p.Name || (asked != "" && s.may(p, PermOwner, key)) {
		return asked
	}
	return p.Name
}

// authInterceptor refuses every RPC whose caller failed authentication,
// before any handler runs; handlers then authorize per key.
func (s *Server) authInterceptor() connect.Interceptor {
	return checkInterceptor(func(ctx context.Context) error {
		_, err := s.principal(ctx)
		return err
	})
}

// requireAdmin refuses the cluster RPCs (member changes, leadership
// transfer) to callers without the admin permission on every key (a rule
// with the empty prefix) once auth is on: they change who stores and serves
// every lease.
func (s *Server) requireAdmin() connect.Interceptor {
	return checkInterceptor(func(ctx context.Context) error {
		_, err := s.authorize(ctx, PermAdmin, "")
		return err
	})
}

// checkInterceptor runs a check before every unary call and stream a
// handler serves, answering its error instead.
type checkInterceptor func(ctx context.Context) error

func (check checkInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if err := check(ctx); err != nil {
			return nil, connectError(err)
		}
		return next(ctx, req)
	}
}

func (check checkInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (check checkInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		if err := check(ctx); err != nil {
			return connectError(err)
		}
		return next(ctx, conn)
	}
}

// requireAdminHTTP is requireAdmin for plain HTTP endpoints (/v1/backup,
// which holds every lease): 401 without a principal, 403 without the
// permission.
func (s *Server) requireAdminHTTP(next http.Handler) http.Handler {
	return s.requireHTTP(PermAdmin, func(*http.Request) string { return "" }, next)
}

// requireHTTP serves r with next if its caller holds perm on the key or
// prefix scope(r) names: 401 without a principal, 403 without the
// permission.
func (s *Server) requireHTTP(perm Permission, scope func(*http.Request) string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := s.authorize(r.Context(), perm, scope(r)); err != nil {
			status := http.StatusForbidden
			if errors.Is(err, errUnauthenticated) {
				status = http.StatusUnauthorized
			}
			http.Error(w, err.Error(), status)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// protectDashboard puts the dashboard's lease stream, which shows keys,
// owners and tokens, under the same rules as Watch once auth is on: the
// caller must authenticate and hold the watch permission on the prefix it
// streams. Browsers authenticate with a client certificate; they cannot
// send bearer tokens on an EventSource.
func (s *Server) protectDashboard(next http.Handler, peer bool) http.Handler {
	prefix := func(r *http.Request) string { return r.URL.Query().Get("prefix") }
	events := s.authenticate(s.requireHTTP(PermWatch, prefix, next), peer)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/events" && s.sec.policy() != nil {
			events.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// leaseOwner returns the owner of lease id of key, if it is current.
func (s *Server) leaseOwner(key, id string) (string, bool) {
	var (
		l   lease.Lease
		err error
	)
	s.fsm.read(func(st *lease.State) { l, err = st.Current(key, id) })
	return l.Owner, err == nil
}

// authorizeAcquire checks that the caller may acquire key and returns the
// owner it may record in place of the owner it asked for (see
// acquireOwner).
func (s *Server) authorizeAcquire(ctx context.Context, key, owner string) (string, error) {
	if err := validateKey(key); err != nil {
		return "", err
	}
	p, err := s.authorize(ctx, PermAcquire, key)
	if err != nil {
		return "", err
	}
	return s.acquireOwner(p, key, owner), nil
}

// authorizeRenew checks that the caller may renew or release lease id of
// key.
func (s *Server) authorizeRenew(ctx context.Context, key, id string) error {
	if err := validateKey(key); err != nil {
		return err
	}
	p, err := s.authorize(ctx, PermRenew, key)
	if err != nil {
		return err
	}
	return s.authorizeHolder(p, key, id)
}
