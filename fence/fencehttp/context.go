package fencehttp

import "context"

type credentialsKey struct{}

type credentials struct {
	scope string
	token uint64
}

// withCredentials records the checked scope and token for the handler.
func withCredentials(ctx context.Context, scope string, token uint64) context.Context {
	return context.WithValue(ctx, credentialsKey{}, credentials{scope, token})
}

// ScopeFromContext returns the scope of the fenced request whose context ctx
// is: the one Middleware checked (from Fencing-Scope or Config.ScopeFunc), so
// a handler need not parse the headers again. ok is false outside a fenced
// request (a safe method, or no Middleware).
func ScopeFromContext(ctx context.Context) (scope string, ok bool) {
	c, ok := ctx.Value(credentialsKey{}).(credentials)
	return c.scope, ok
}

// TokenFromContext returns the token Middleware accepted for the fenced
// request whose context ctx is; ok is false outside a fenced request.
func TokenFromContext(ctx context.Context) (token uint64, ok bool) {
	c, ok := ctx.Value(credentialsKey{}).(credentials)
	return c.token, ok
}
