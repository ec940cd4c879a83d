package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"connectrpc.com/connect"
	"github.com/fencedio/fenced/lease"
	"github.com/fencedio/fenced/server/internal/admission"
	"github.com/fencedio/fenced/server/internal/apierr"
	"github.com/fencedio/fenced/server/internal/rejections"
	"github.com/fencedio/fenced/server/internal/security"
)

// authenticate identifies the caller of every API request, from a bearer
// token or else a verified client certificate, and passes the outcome on in
// the request's context. It refuses nothing itself: the interceptor answers
// in the RPC protocol the client speaks.
//
// On the peer port (peer true) a call another node forwarded names the
// principal that node authenticated (security.ForwardedPrincipalHeader), which is
// taken as is, and another node's relay of rejections is relayPrincipal. On
// the public port both headers are removed before anything reads them.
func (s *Server) authenticate(next http.Handler, peer bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fwd := r.Header.Get(security.ForwardedPrincipalHeader)
		if !peer {
			// Both names are canonical: Header.Del would canonicalize them again.
			delete(r.Header, security.ForwardedPrincipalHeader)
			delete(r.Header, rejections.RelayHeader)
			fwd = ""
		}
		pol := s.sec.Policy()
		if pol == nil {
			next.ServeHTTP(w, r)
			return
		}
		var res security.AuthResult
		switch {
		case fwd != "":
			res.Principal, res.Err = security.DecodePrincipal(fwd)
		case r.Header.Get(rejections.RelayHeader) != "": // only on the peer port
			res.Principal = relayPrincipal
		default:
			res.Principal, res.Err = pol.Authenticate(r, time.Now())
		}
		next.ServeHTTP(w, admission.WithAuth(r, res))
	})
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

// principal returns the caller of ctx's request, ErrUnauthenticated if
// authentication failed, and security.Anonymous while auth is off.
func (s *Server) principal(ctx context.Context) (Principal, error) {
	if s.sec.Policy() == nil {
		return security.Anonymous, nil
	}
	res, ok := admission.AuthOf(ctx)
	if !ok {
		return Principal{}, fmt.Errorf("%w: request did not pass authentication", ErrUnauthenticated)
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
			return nil, apierr.Connect(err)
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
			return apierr.Connect(err)
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
			if errors.Is(err, ErrUnauthenticated) {
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
		if r.URL.Path == "/v1/events" && s.sec.Policy() != nil {
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
	s.fsm.Read(func(st *lease.State) { l, err = st.Current(key, id) })
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
