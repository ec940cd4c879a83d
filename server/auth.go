package server

import (
	"context"
	"fmt"
	"net/http"

	"connectrpc.com/connect"
	"github.com/fencedio/fenced/lease"
	"github.com/fencedio/fenced/server/internal/admission"
	"github.com/fencedio/fenced/server/internal/api"
	"github.com/fencedio/fenced/server/internal/apierr"
	"github.com/fencedio/fenced/server/internal/rejections"
	"github.com/fencedio/fenced/server/internal/security"
)

// httpAuth is the node's authentication and authorization as HTTP
// middleware (security.HTTPAuth): the outcome is kept in the request's
// call record (admission.WithAuth), a relay of rejections from another
// node is relayPrincipal, and authorize decides.
func (s *Server) httpAuth() *security.HTTPAuth {
	return &security.HTTPAuth{
		Policy:      func() *security.Policy { return s.sec.Policy() },
		RelayHeader: rejections.RelayHeader,
		Relay:       relayPrincipal,
		Keep:        admission.WithAuth,
		Authorize: func(ctx context.Context, need Permission, prefix string) error {
			_, err := s.authorize(ctx, need, prefix)
			return err
		},
	}
}

// authenticate identifies the caller of every API request and passes the
// outcome on in the request's context (security.HTTPAuth.Authenticate).
func (s *Server) authenticate(next http.Handler, peer bool) http.Handler {
	return s.httpAuth().Authenticate(next, peer)
}

// forwardPrincipal sets on h, the headers of a call this node forwards to
// the leader, the principal ctx's caller authenticated as here. Nothing
// while auth is off.
func (s *Server) forwardPrincipal(ctx context.Context, h http.Header) {
	if s.sec.Policy() == nil {
		return
	}
	if res, ok := admission.AuthOf(ctx); ok && res.Err == nil {
		h.Set(security.ForwardedPrincipalHeader, security.EncodePrincipal(res.Principal))
	}
}

// principal returns the caller of ctx's request, security.ErrUnauthenticated if
// authentication failed, and security.Anonymous while auth is off.
func (s *Server) principal(ctx context.Context) (Principal, error) {
	if s.sec.Policy() == nil {
		return security.Anonymous, nil
	}
	res, ok := admission.AuthOf(ctx)
	if !ok {
		return Principal{}, fmt.Errorf("%w: request did not pass authentication", security.ErrUnauthenticated)
	}
	return res.Principal, res.Err
}

// authorize returns the caller of ctx if it may do need on prefix (a key,
// or a prefix of keys for List and Watch).
func (s *Server) authorize(ctx context.Context, need Permission, prefix string) (Principal, error) {
	p, err := s.principal(ctx)
	if err != nil {
		return Principal{}, err
	}
	if pol := s.sec.Policy(); pol != nil && !pol.Allowed(p.Name, need, prefix) {
		return Principal{}, &DeniedError{Principal: p.Name, Need: need, Key: prefix}
	}
	return p, nil
}

// may reports whether p may do need on key; always while auth is off.
func (s *Server) may(p Principal, need Permission, key string) bool {
	pol := s.sec.Policy()
	return pol == nil || pol.Allowed(p.Name, need, key)
}

// authorizeHolder checks that p may renew or release lease id of key: its
// own lease (owner is the principal), or any with the owner permission. A
// lease that is not current passes, to be answered NOT_FOUND as without
// auth.
func (s *Server) authorizeHolder(p Principal, key, id string) error {
	if s.sec.Policy() == nil {
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
	if s.sec.Policy() == nil || asked == p.Name || (asked != "" && s.may(p, PermOwner, key)) {
		return asked
	}
	return p.Name
}

// authInterceptor refuses every RPC whose caller failed authentication,
// before any handler runs; handlers then authorize per key.
func (s *Server) authInterceptor() connect.Interceptor {
	return security.CheckInterceptor{Wire: apierr.Connect, Check: func(ctx context.Context) error {
		_, err := s.principal(ctx)
		return err
	}}
}

// requireAdmin refuses the cluster RPCs (member changes, leadership
// transfer) to callers without the admin permission on every key (a rule
// with the empty prefix) once auth is on: they change who stores and serves
// every lease.
func (s *Server) requireAdmin() connect.Interceptor {
	return security.CheckInterceptor{Wire: apierr.Connect, Check: func(ctx context.Context) error {
		_, err := s.authorize(ctx, PermAdmin, "")
		return err
	}}
}

// leaseOwner returns the owner of lease id of key, if it is current.
func (s *Server) leaseOwner(key, id string) (string, bool) {
	var (
		l   lease.Lease
		err error
	)
	s.fsm.Read(func(st *lease.State) { l, err = st.Current(key, id) })
	return l.Owner, err == nil
}

// authorizeAcquire checks that the caller may acquire key and returns the
// owner it may record in place of the owner it asked for (see
// acquireOwner).
func (s *Server) authorizeAcquire(ctx context.Context, key, owner string) (string, error) {
	if err := api.ValidateKey(key); err != nil {
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
	if err := api.ValidateKey(key); err != nil {
		return err
	}
	p, err := s.authorize(ctx, PermRenew, key)
	if err != nil {
		return err
	}
	return s.authorizeHolder(p, key, id)
}
