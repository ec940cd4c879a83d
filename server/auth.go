package server

import (
	"context"
	"net/http"

	"github.com/fencedio/fenced/lease"
	"github.com/fencedio/fenced/server/internal/admission"
	"github.com/fencedio/fenced/server/internal/apierr"
	"github.com/fencedio/fenced/server/internal/rejections"
	"github.com/fencedio/fenced/server/internal/security"
)

// newAuthorizer is the node's authorization (security.Authorizer): the
// policy in force, the outcome of authentication kept in the request's call
// record (admission.AuthOf), and the owner of a current lease read from the
// state machine.
func (s *Server) newAuthorizer() *security.Authorizer {
	return &security.Authorizer{
		Policy: s.sec.Policy,
		Auth:   admission.AuthOf,
		Owner:  s.leaseOwner,
		Wire:   apierr.Connect,
	}
}

// httpAuth is the node's authentication and authorization as HTTP
// middleware (security.HTTPAuth): the outcome is kept in the request's
// call record (admission.WithAuth), a relay of rejections from another
// node is relayPrincipal, and s.authz decides.
func (s *Server) httpAuth() *security.HTTPAuth {
	return &security.HTTPAuth{
		Policy:      s.sec.Policy,
		RelayHeader: rejections.RelayHeader,
		Relay:       relayPrincipal,
		Keep:        admission.WithAuth,
		Authorize: func(ctx context.Context, need Permission, prefix string) error {
			_, err := s.authz.Authorize(ctx, need, prefix)
			return err
		},
	}
}

// authenticate identifies the caller of every API request and passes the
// outcome on in the request's context (security.HTTPAuth.Authenticate).
func (s *Server) authenticate(next http.Handler, peer bool) http.Handler {
	return s.httpAuth().Authenticate(next, peer)
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
