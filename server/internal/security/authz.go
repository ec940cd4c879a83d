package security

import (
	"context"
	"fmt"
	"net/http"

	"connectrpc.com/connect"
)

// OwnerLookup returns the owner of lease id of key, if it is current (the
// node reads it from its state machine).
type OwnerLookup func(key, id string) (owner string, ok bool)

// Authorizer is a node's authorization of a caller: who it is (from what
// authentication kept for its request) and what the policy in force lets
// it do on a key, including the rules the node adds to the policy's for
// the leases a principal holds. While auth is off (Policy returns nil)
// every caller is Anonymous and may do everything.
type Authorizer struct {
	// Policy is the policy in force; nil while auth is off.
	Policy func() *Policy
	// Auth returns what HTTPAuth.Authenticate kept for ctx's request
	// (HTTPAuth.Keep); false if the request did not pass it.
	Auth func(ctx context.Context) (AuthResult, bool)
	// Owner looks up the owner of a current lease: a principal may renew
	// and release its own leases.
	Owner OwnerLookup
	// Wire gives a refusal of the interceptors its Connect form.
	Wire func(error) error
}

// ForwardPrincipal sets on h, the headers of a call this node forwards to
// the leader, the principal ctx's caller authenticated as here. Nothing
// while auth is off.
func (a *Authorizer) ForwardPrincipal(ctx context.Context, h http.Header) {
	if a.Policy() == nil {
		return
	}
	if res, ok := a.Auth(ctx); ok && res.Err == nil {
		h.Set(ForwardedPrincipalHeader, EncodePrincipal(res.Principal))
	}
}

// Principal returns the caller of ctx's request, ErrUnauthenticated if
// authentication failed, and Anonymous while auth is off.
func (a *Authorizer) Principal(ctx context.Context) (Principal, error) {
	if a.Policy() == nil {
		return Anonymous, nil
	}
	res, ok := a.Auth(ctx)
	if !ok {
		return Principal{}, fmt.Errorf("%w: request did not pass authentication", ErrUnauthenticated)
	}
	return res.Principal, res.Err
}

// Authorize returns the caller of ctx if it may do need on prefix (a key,
// or a prefix of keys for List and Watch).
func (a *Authorizer) Authorize(ctx context.Context, need Permission, prefix string) (Principal, error) {
	p, err := a.Principal(ctx)
	if err != nil {
		return Principal{}, err
	}
	if pol := a.Policy(); pol != nil && !pol.Allowed(p.Name, need, prefix) {
		return Principal{}, &DeniedError{Principal: p.Name, Need: need, Key: prefix}
	}
	return p, nil
}

// may reports whether p may do need on key; always while auth is off.
func (a *Authorizer) may(p Principal, need Permission, key string) bool {
	pol := a.Policy()
	return pol == nil || pol.Allowed(p.Name, need, key)
}

// authorizeHolder checks that p may renew or release lease id of key: its
// own lease (owner is the principal), or any with the owner permission. A
// lease that is not current passes, to be answered NOT_FOUND as without
// auth.
func (a *Authorizer) authorizeHolder(p Principal, key, id string) error {
	if a.Policy() == nil {
		return nil
	}
	owner, ok := a.Owner(key, id)
	if !ok || owner == p.Name || a.may(p, PermOwner, key) {
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
func (a *Authorizer) acquireOwner(p Principal, key, asked string) string {
	if a.Policy() == nil || asked == p.Name || (asked != "" && a.may(p, PermOwner, key)) {
		return asked
	}
	return p.Name
}

// AuthorizeAcquire checks that the caller may acquire key and returns the
// owner it may record in place of the owner it asked for (see
// acquireOwner). The key is the caller's to have validated.
func (a *Authorizer) AuthorizeAcquire(ctx context.Context, key, owner string) (string, error) {
	p, err := a.Authorize(ctx, PermAcquire, key)
	if err != nil {
		return "", err
	}
	return a.acquireOwner(p, key, owner), nil
}

// AuthorizeRenew checks that the caller may renew or release lease id of
// key. The key is the caller's to have validated.
func (a *Authorizer) AuthorizeRenew(ctx context.Context, key, id string) error {
	p, err := a.Authorize(ctx, PermRenew, key)
	if err != nil {
		return err
	}
	return a.authorizeHolder(p, key, id)
}

// Interceptor refuses every RPC whose caller failed authentication,
// before any handler runs; handlers then authorize per key.
func (a *Authorizer) Interceptor() connect.Interceptor {
	return CheckInterceptor{Wire: a.Wire, Check: func(ctx context.Context) error {
		_, err := a.Principal(ctx)
		return err
	}}
}

// RequireAdmin refuses the cluster RPCs (member changes, leadership
// transfer) to callers without the admin permission on every key (a rule
// with the empty prefix) once auth is on: they change who stores and serves
// every lease.
func (a *Authorizer) RequireAdmin() connect.Interceptor {
	return CheckInterceptor{Wire: a.Wire, Check: func(ctx context.Context) error {
		_, err := a.Authorize(ctx, PermAdmin, "")
		return err
	}}
}
