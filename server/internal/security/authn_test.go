package security

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"connectrpc.com/connect"
)

type authKey struct{}

// testAuth is an HTTPAuth over a policy with one token, secret "s3cret"
// for principal "billing", keeping results in a context value of its own
// and allowing only billing to watch "billing/".
func testAuth(t *testing.T, on bool) *HTTPAuth {
	t.Helper()
	pol, err := ParsePolicy([]byte(fmt.Sprintf(`{"tokens": [{"principal": "billing", "sha256": %q}]}`, HashSecret("s3cret"))))
	if err != nil {
		t.Fatal(err)
	}
	return &HTTPAuth{
		Policy: func() *Policy {
			if !on {
				return nil
			}
			return pol
		},
		RelayHeader: "Fenced-Test-Relay",
		Relay:       Principal{Name: "fenced-peer", Method: "peer"},
		Keep: func(r *http.Request, res AuthResult) *http.Request {
			return r.WithContext(context.WithValue(r.Context(), authKey{}, res))
		},
		Authorize: func(ctx context.Context, need Permission, prefix string) error {
			res, ok := ctx.Value(authKey{}).(AuthResult)
			switch {
			case !ok:
				return fmt.Errorf("%w: request did not pass authentication", ErrUnauthenticated)
			case res.Err != nil:
				return res.Err
			case res.Principal.Name != "billing" || need != PermWatch || prefix != "billing/":
				return &DeniedError{Principal: res.Principal.Name, Need: need, Key: prefix}
			}
			return nil
		},
	}
}

// Authenticate keeps what it found: a bearer token's principal on either
// port, a forwarded principal and a relay only on the peer port, whose
// headers the public port removes; nothing while auth is off.
func TestAuthenticate(t *testing.T) {
	billing := EncodePrincipal(Principal{Name: "billing", Method: "token"})
	for _, tc := range []struct {
		name    string
		on      bool
		peer    bool
		headers map[string]string
		want    string // principal; "-" no result kept; "!" an error
	}{
		{"auth off", false, false, map[string]string{"Authorization": "Bearer s3cret"}, "-"},
		{"token", true, false, map[string]string{"Authorization": "Bearer s3cret"}, "billing"},
		{"bad token", true, false, map[string]string{"Authorization": "Bearer nope"}, "!"},
		{"forwarded on the public port", true, false, map[string]string{ForwardedPrincipalHeader: billing}, "!"},
		{"relay on the public port", true, false, map[string]string{"Fenced-Test-Relay": "1"}, "!"},
		{"forwarded on the peer port", true, true, map[string]string{ForwardedPrincipalHeader: billing}, "billing"},
		{"relay on the peer port", true, true, map[string]string{"Fenced-Test-Relay": "1"}, "fenced-peer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got string
			a := testAuth(t, tc.on)
			h := a.Authenticate(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if !tc.peer && (r.Header.Get(ForwardedPrincipalHeader) != "" || r.Header.Get(a.RelayHeader) != "") {
					t.Error("the public port left a forwarded principal or relay header in place")
				}
				res, ok := r.Context().Value(authKey{}).(AuthResult)
				switch {
				case !ok:
					got = "-"
				case res.Err != nil:
					if !errors.Is(res.Err, ErrUnauthenticated) {
						t.Errorf("error %v, want unauthenticated", res.Err)
					}
					got = "!"
				default:
					got = res.Principal.Name
				}
			}), tc.peer)
			r := httptest.NewRequest(http.MethodPost, "/", nil)
			for k, v := range tc.headers {
				r.Header.Set(k, v)
			}
			h.ServeHTTP(httptest.NewRecorder(), r)
			if got != tc.want {
				t.Errorf("kept %q, want %q", got, tc.want)
			}
		})
	}
}

// RequireHTTP and ProtectDashboard answer 401 without a principal and 403
// without the permission; the dashboard's event stream is checked only
// while auth is on, and its other pages never.
func TestRequireHTTPAndProtectDashboard(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	for _, tc := range []struct {
		name, path, token string
		on                bool
		want              int
	}{
		{"events without credentials", "/v1/events?prefix=billing/", "", true, http.StatusUnauthorized},
		{"events with a bad token", "/v1/events?prefix=billing/", "nope", true, http.StatusUnauthorized},
		{"events beyond the permission", "/v1/events?prefix=other/", "s3cret", true, http.StatusForbidden},
		{"events within the permission", "/v1/events?prefix=billing/", "s3cret", true, http.StatusOK},
		{"events while auth is off", "/v1/events?prefix=other/", "", false, http.StatusOK},
		{"the page", "/", "", true, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, tc.path, nil)
			if tc.token != "" {
				r.Header.Set("Authorization", "Bearer "+tc.token)
			}
			w := httptest.NewRecorder()
			testAuth(t, tc.on).ProtectDashboard(ok, false).ServeHTTP(w, r)
			if w.Code != tc.want {
				t.Errorf("status %d, want %d: %s", w.Code, tc.want, w.Body)
			}
		})
	}
	a := testAuth(t, true)
	r := httptest.NewRequest(http.MethodGet, "/v1/backup", nil)
	r.Header.Set("Authorization", "Bearer s3cret")
	w := httptest.NewRecorder()
	a.Authenticate(a.RequireAdminHTTP(ok), false).ServeHTTP(w, r)
	if w.Code != http.StatusForbidden {
		t.Errorf("backup without admin: %d, want 403", w.Code)
	}
}

// CheckInterceptor answers a failed check in its wire form before the
// handler runs, for unary calls and streams alike.
func TestCheckInterceptor(t *testing.T) {
	denied := errors.New("denied")
	var fail bool
	c := CheckInterceptor{
		Check: func(context.Context) error {
			if fail {
				return denied
			}
			return nil
		},
		Wire: func(err error) error { return connect.NewError(connect.CodePermissionDenied, err) },
	}
	var ran int
	unary := c.WrapUnary(func(context.Context, connect.AnyRequest) (connect.AnyResponse, error) { ran++; return nil, nil })
	stream := c.WrapStreamingHandler(func(context.Context, connect.StreamingHandlerConn) error { ran++; return nil })
	if _, err := unary(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if err := stream(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	fail = true
	if _, err := unary(context.Background(), nil); connect.CodeOf(err) != connect.CodePermissionDenied || !errors.Is(err, denied) {
		t.Errorf("unary: %v, want permission_denied wrapping the check's error", err)
	}
	if err := stream(context.Background(), nil); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("stream: %v, want permission_denied", err)
	}
	if ran != 2 {
		t.Errorf("handlers ran %d times, want 2 (only while the check passed)", ran)
	}
}
