package security

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"connectrpc.com/connect"
)

// testAuthorizer is an Authorizer over a policy (nil: auth off) whose
// callers' authentication results travel in a context value of their own,
// and whose current leases are owners, by key and lease ID.
func testAuthorizer(pol *Policy, owners map[[2]string]string) *Authorizer {
	return &Authorizer{
		Policy: func() *Policy { return pol },
		Auth: func(ctx context.Context) (AuthResult, bool) {
			res, ok := ctx.Value(authKey{}).(AuthResult)
			return res, ok
		},
		Owner: func(key, id string) (string, bool) {
			o, ok := owners[[2]string{key, id}]
			return o, ok
		},
		Wire: func(err error) error { return fmt.Errorf("wired: %w", err) },
	}
}

// testPolicy lets billing acquire and renew under "billing/", ops act for
// any owner there too, everyone read "public/", root do everything and
// half-admin be admin of "billing/" only.
func testPolicy(t *testing.T) *Policy {
	t.Helper()
	pol, err := ParsePolicy([]byte(`{"rules": [
		{"principal": "billing", "prefix": "billing/", "permissions": ["acquire", "renew"]},
		{"principal": "ops", "prefix": "billing/", "permissions": ["acquire", "renew", "owner"]},
		{"principal": "*", "prefix": "public/", "permissions": ["read"]},
		{"principal": "root", "prefix": "", "permissions": ["admin"]},
		{"principal": "half-admin", "prefix": "billing/", "permissions": ["admin"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	return pol
}

// as is a context whose caller authenticated as name.
func as(name string) context.Context {
	return context.WithValue(context.Background(), authKey{}, AuthResult{Principal: Principal{Name: name, Method: "token"}})
}

// Authorize grants what a rule's prefix covers and nothing else, names
// the principal, permission and key it refused, and answers a caller
// without a principal unauthenticated.
func TestAuthorizePrefixScopes(t *testing.T) {
	a := testAuthorizer(testPolicy(t), nil)
	for _, tc := range []struct {
		who    string
		need   Permission
		prefix string
		want   string // "" allowed, else the error's text
	}{
		{"billing", PermAcquire, "billing/x", ""},
		{"billing", PermAcquire, "billing/", ""},
		{"billing", PermAcquire, "billing", `permission denied: principal "billing" has no acquire permission on "billing"`},
		{"billing", PermAcquire, "other/x", `permission denied: principal "billing" has no acquire permission on "other/x"`},
		{"billing", PermRead, "billing/x", `permission denied: principal "billing" has no read permission on "billing/x"`},
		{"billing", PermRead, "public/x", ""},
		{"stranger", PermRead, "public/", ""},
		{"stranger", PermWatch, "public/", `permission denied: principal "stranger" has no watch permission on "public/"`},
		{"root", PermOwner, "anything", ""},
		{"root", PermWatch, "", ""},
	} {
		p, err := a.Authorize(as(tc.who), tc.need, tc.prefix)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s %s on %q: %v, want allowed", tc.who, tc.need, tc.prefix, err)
		case tc.want == "" && p.Name != tc.who:
			t.Errorf("%s %s on %q: principal %q", tc.who, tc.need, tc.prefix, p.Name)
		case tc.want != "" && (err == nil || err.Error() != tc.want || !errors.Is(err, ErrPermissionDenied)):
			t.Errorf("%s %s on %q: %v, want %q", tc.who, tc.need, tc.prefix, err, tc.want)
		}
	}

	_, err := a.Authorize(context.Background(), PermRead, "public/")
	if !errors.Is(err, ErrUnauthenticated) || err.Error() != "unauthenticated: request did not pass authentication" {
		t.Errorf("without authentication: %v", err)
	}
	failed := fmt.Errorf("%w: the bearer token matches no principal", ErrUnauthenticated)
	ctx := context.WithValue(context.Background(), authKey{}, AuthResult{Err: failed})
	if _, err := a.Authorize(ctx, PermRead, "public/"); err != failed {
		t.Errorf("failed authentication: %v, want %v", err, failed)
	}
}

// An acquisition records the principal as owner, whatever owner it
// asked for, unless it holds the owner permission on the key and names one.
func TestAuthorizeAcquireOwner(t *testing.T) {
	a := testAuthorizer(testPolicy(t), nil)
	for _, tc := range []struct {
		who, key, asked, want string
	}{
		{"billing", "billing/x", "", "billing"},
		{"billing", "billing/x", "host-1/pid-7", "billing"},
		{"billing", "billing/x", "ops", "billing"},
		{"billing", "billing/x", "billing", "billing"},
		{"ops", "billing/x", "batch-job", "batch-job"},
		{"ops", "billing/x", "", "ops"},
		{"root", "other/x", "someone", "someone"},
	} {
		got, err := a.AuthorizeAcquire(as(tc.who), tc.key, tc.asked)
		if err != nil || got != tc.want {
			t.Errorf("%s acquiring %q as %q: owner %q, %v; want %q", tc.who, tc.key, tc.asked, got, err, tc.want)
		}
	}
	if _, err := a.AuthorizeAcquire(as("billing"), "other/x", "billing"); !errors.Is(err, ErrPermissionDenied) {
		t.Errorf("acquire outside the prefix: %v", err)
	}
}

// A holder renews and releases its own lease only; the owner permission
// reaches every lease of its keys; a lease that is not current passes (it
// is answered NOT_FOUND further in).
func TestAuthorizeRenewHolder(t *testing.T) {
	a := testAuthorizer(testPolicy(t), map[[2]string]string{
		{"billing/x", "L1"}: "billing",
		{"billing/y", "L2"}: "batch-job",
	})
	for _, tc := range []struct {
		who, key, id string
		want         string // "" allowed, else the error's text
	}{
		{"billing", "billing/x", "L1", ""},
		{"billing", "billing/y", "L2", `permission denied: lease of "billing/y" is held by "batch-job", not by principal "billing"`},
		{"billing", "billing/y", "gone", ""},
		{"billing", "other/x", "L1", `permission denied: principal "billing" has no renew permission on "other/x"`},
		{"ops", "billing/y", "L2", ""},
		{"ops", "billing/x", "L1", ""},
		{"root", "billing/y", "L2", ""},
	} {
		err := a.AuthorizeRenew(as(tc.who), tc.key, tc.id)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s renewing %s of %q: %v, want allowed", tc.who, tc.id, tc.key, err)
		case tc.want != "" && (err == nil || err.Error() != tc.want || !errors.Is(err, ErrPermissionDenied)):
			t.Errorf("%s renewing %s of %q: %v, want %q", tc.who, tc.id, tc.key, err, tc.want)
		}
	}
	var denied *DeniedError
	if err := a.AuthorizeRenew(as("billing"), "billing/y", "L2"); !errors.As(err, &denied) || denied.Need != PermOwner || denied.Principal != "billing" {
		t.Errorf("renewing another's lease: %#v", err)
	}
}

// The cluster RPCs need admin on every key; the interceptor of the others
// refuses only a caller without a principal. Both answer through Wire.
func TestInterceptors(t *testing.T) {
	a := testAuthorizer(testPolicy(t), nil)
	ran := false
	next := func(context.Context, connect.AnyRequest) (connect.AnyResponse, error) { ran = true; return nil, nil }
	for _, tc := range []struct {
		name  string
		ic    connect.Interceptor
		ctx   context.Context
		want  error // nil: the handler runs
		wired string
	}{
		{"admin as root", a.RequireAdmin(), as("root"), nil, ""},
		{"admin as billing", a.RequireAdmin(), as("billing"), ErrPermissionDenied,
			`wired: permission denied: principal "billing" has no admin permission on ""`},
		{"admin of a prefix only", a.RequireAdmin(), as("half-admin"), ErrPermissionDenied,
			`wired: permission denied: principal "half-admin" has no admin permission on ""`},
		{"admin unauthenticated", a.RequireAdmin(), context.Background(), ErrUnauthenticated,
			"wired: unauthenticated: request did not pass authentication"},
		{"any call as billing", a.Interceptor(), as("billing"), nil, ""},
		{"any call unauthenticated", a.Interceptor(), context.Background(), ErrUnauthenticated,
			"wired: unauthenticated: request did not pass authentication"},
	} {
		ran = false
		_, err := tc.ic.WrapUnary(next)(tc.ctx, nil)
		switch {
		case tc.want == nil && (err != nil || !ran):
			t.Errorf("%s: %v, handler ran %v", tc.name, err, ran)
		case tc.want != nil && (ran || !errors.Is(err, tc.want) || err.Error() != tc.wired):
			t.Errorf("%s: %v (handler ran %v), want %q", tc.name, err, ran, tc.wired)
		}
	}
}

// While auth is off every caller is Anonymous and may do everything: any
// key, any owner, anyone's lease, the cluster RPCs; nothing is forwarded.
func TestAuthOffAllowsEverything(t *testing.T) {
	a := testAuthorizer(nil, map[[2]string]string{{"k", "L1"}: "someone"})
	a.Auth = func(context.Context) (AuthResult, bool) {
		t.Error("auth off consulted authentication")
		return AuthResult{}, false
	}
	a.Owner = func(string, string) (string, bool) { t.Error("auth off looked up an owner"); return "", false }
	ctx := context.Background()
	if p, err := a.Principal(ctx); err != nil || p != Anonymous {
		t.Errorf("principal %v, %v; want Anonymous", p, err)
	}
	if p, err := a.Authorize(ctx, PermAdmin, ""); err != nil || p != Anonymous {
		t.Errorf("authorize admin: %v, %v", p, err)
	}
	for _, asked := range []string{"", "someone", "host-1/pid-7"} {
		if got, err := a.AuthorizeAcquire(ctx, "k", asked); err != nil || got != asked {
			t.Errorf("acquire as %q: owner %q, %v", asked, got, err)
		}
	}
	if err := a.AuthorizeRenew(ctx, "k", "L1"); err != nil {
		t.Errorf("renew another's lease: %v", err)
	}
	next := func(context.Context, connect.AnyRequest) (connect.AnyResponse, error) { return nil, nil }
	for _, ic := range []connect.Interceptor{a.Interceptor(), a.RequireAdmin()} {
		if _, err := ic.WrapUnary(next)(ctx, nil); err != nil {
			t.Errorf("interceptor: %v", err)
		}
	}
	h := http.Header{}
	a.ForwardPrincipal(as("billing"), h)
	if len(h) != 0 {
		t.Errorf("forwarded %v with auth off", h)
	}
}

// A forwarded call names the principal its caller authenticated as here,
// and none for a caller that failed to.
func TestForwardPrincipal(t *testing.T) {
	a := testAuthorizer(testPolicy(t), nil)
	h := http.Header{}
	a.ForwardPrincipal(as("billing"), h)
	if p, err := DecodePrincipal(h.Get(ForwardedPrincipalHeader)); err != nil || p.Name != "billing" || p.Method != "token" {
		t.Errorf("forwarded %q: %v, %v", h.Get(ForwardedPrincipalHeader), p, err)
	}
	h = http.Header{}
	a.ForwardPrincipal(context.WithValue(context.Background(), authKey{}, AuthResult{Err: ErrUnauthenticated}), h)
	a.ForwardPrincipal(context.Background(), h)
	if len(h) != 0 {
		t.Errorf("forwarded %v for a caller without a principal", h)
	}
}
