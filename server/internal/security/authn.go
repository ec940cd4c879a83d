package security

import (
	"context"
	"errors"
	"net/http"
	"time"

	"connectrpc.com/connect"
)

// AuthResult is what authentication found for a request: the principal,
// or the error that says why there is none.
type AuthResult struct {
	Principal Principal
	Err       error
}

// HTTPAuth is a node's authentication and authorization as HTTP
// middleware. The node passes in what the package cannot know: the policy
// in force, how a relay of another node is marked, where the outcome is
// kept for the handlers further in, and its own authorization of a
// caller.
type HTTPAuth struct {
	// Policy is the policy in force; nil while auth is off.
	Policy func() *Policy
	// RelayHeader marks another node's relay of rejections over the peer
	// port; its caller is Relay.
	RelayHeader string
	Relay       Principal
	// Keep records res for r's handlers and returns the request they are
	// served.
	Keep func(r *http.Request, res AuthResult) *http.Request
	// Authorize returns nil if the caller of ctx may do need on prefix; an
	// error matching ErrUnauthenticated if it has no principal.
	Authorize func(ctx context.Context, need Permission, prefix string) error
}

// Authenticate identifies the caller of every API request, from a bearer
// token or else a verified client certificate, and passes the outcome on in
// the request's context (Keep). It refuses nothing itself: the interceptor
// answers in the RPC protocol the client speaks.
//
// On the peer port (peer true) a call another node forwarded names the
// principal that node authenticated (ForwardedPrincipalHeader), which is
// taken as is, and another node's relay of rejections is Relay. On the
// public port both headers are removed before anything reads them.
func (a *HTTPAuth) Authenticate(next http.Handler, peer bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fwd := r.Header.Get(ForwardedPrincipalHeader)
		if !peer {
			// Both names are canonical: Header.Del would canonicalize them again.
			delete(r.Header, ForwardedPrincipalHeader)
			delete(r.Header, a.RelayHeader)
			fwd = ""
		}
		pol := a.Policy()
		if pol == nil {
			next.ServeHTTP(w, r)
			return
		}
		var res AuthResult
		switch {
		case fwd != "":
			res.Principal, res.Err = DecodePrincipal(fwd)
		case r.Header.Get(a.RelayHeader) != "": // only on the peer port
			res.Principal = a.Relay
		default:
			res.Principal, res.Err = pol.Authenticate(r, time.Now())
		}
		next.ServeHTTP(w, a.Keep(r, res))
	})
}

// RequireAdminHTTP is RequireHTTP of the admin permission on every key,
// for plain HTTP endpoints (/v1/backup, which holds every lease): 401
// without a principal, 403 without the permission.
func (a *HTTPAuth) RequireAdminHTTP(next http.Handler) http.Handler {
	return a.RequireHTTP(PermAdmin, func(*http.Request) string { return "" }, next)
}

// RequireHTTP serves r with next if its caller holds perm on the key or
// prefix scope(r) names: 401 without a principal, 403 without the
// permission.
func (a *HTTPAuth) RequireHTTP(perm Permission, scope func(*http.Request) string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := a.Authorize(r.Context(), perm, scope(r)); err != nil {
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

// ProtectDashboard puts the dashboard's lease stream (/v1/events), which
// shows keys, owners and tokens, under the same rules as Watch once auth
// is on: the caller must authenticate and hold the watch permission on the
// prefix it streams. Browsers authenticate with a client certificate; they
// cannot send bearer tokens on an EventSource.
func (a *HTTPAuth) ProtectDashboard(next http.Handler, peer bool) http.Handler {
	prefix := func(r *http.Request) string { return r.URL.Query().Get("prefix") }
	events := a.Authenticate(a.RequireHTTP(PermWatch, prefix, next), peer)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/events" && a.Policy() != nil {
			events.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// CheckInterceptor runs Check before every unary call and stream a
// handler serves, answering its error, in the form Wire gives it (its
// Connect code), instead.
type CheckInterceptor struct {
	Check func(ctx context.Context) error
	Wire  func(error) error
}

// WrapUnary runs the check before a unary call.
func (c CheckInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if err := c.Check(ctx); err != nil {
			return nil, c.Wire(err)
		}
		return next(ctx, req)
	}
}

// WrapStreamingClient leaves a client's streams alone.
func (c CheckInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler runs the check before a stream's handler.
func (c CheckInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		if err := c.Check(ctx); err != nil {
			return c.Wire(err)
		}
		return next(ctx, conn)
	}
}
