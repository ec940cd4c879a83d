package security

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func TestPolicyRejects(t *testing.T) {
	for name, body := range map[string]string{
		"unknown permission": `{"rules": [{"principal": "a", "prefix": "", "permissions": ["write"]}]}`,
		"short hash":         `{"tokens": [{"principal": "a", "sha256": "abcd"}]}`,
		"no principal":       fmt.Sprintf(`{"tokens": [{"sha256": %q}]}`, HashSecret("x")),
		"duplicate secret":   fmt.Sprintf(`{"tokens": [{"principal": "a", "sha256": %q}, {"principal": "b", "sha256": %q}]}`, HashSecret("x"), HashSecret("x")),
		"unknown field":      `{"token": []}`,
		"not json":           `rules: []`,
	} {
		if _, err := ParsePolicy([]byte(body)); !errors.Is(err, ErrBadPolicy) {
			t.Errorf("%s: %v, want ErrBadPolicy", name, err)
		}
	}
}

// A policy authenticates a bearer secret until its token expires, and
// grants only what a rule of the principal (or of "*") covers.
func TestPolicyAuthenticatesAndAllows(t *testing.T) {
	expires := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	p, err := ParsePolicy([]byte(fmt.Sprintf(`{
		"tokens": [{"principal": "billing", "sha256": %q},
		           {"principal": "temp", "sha256": %q, "expires": %q}],
		"rules":  [{"principal": "billing", "prefix": "billing/", "permissions": ["acquire", "renew"]},
		           {"principal": "*", "prefix": "public/", "permissions": ["read"]},
		           {"principal": "root", "prefix": "", "permissions": ["admin"]}]
	}`, HashSecret("s3cret"), HashSecret("short"), expires.Format(time.RFC3339))))
	if err != nil {
		t.Fatal(err)
	}
	bearer := func(v string) *http.Request {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		if v != "" {
			r.Header.Set("Authorization", v)
		}
		return r
	}
	before := expires.Add(-time.Second)
	for _, tc := range []struct {
		name, header string
		at           time.Time
		want         string // "" : unauthenticated
	}{
		{"token", "Bearer s3cret", before, "billing"},
		{"scheme in any case", "bearer s3cret", before, "billing"},
		{"unknown secret", "Bearer nope", before, ""},
		{"not bearer", "Basic s3cret", before, ""},
		{"no credentials", "", before, ""},
		{"before expiry", "Bearer short", before, "temp"},
		{"at expiry", "Bearer short", expires, ""},
	} {
		got, err := p.Authenticate(bearer(tc.header), tc.at)
		switch {
		case tc.want == "" && !errors.Is(err, ErrUnauthenticated):
			t.Errorf("%s: %+v, %v; want ErrUnauthenticated", tc.name, got, err)
		case tc.want != "" && (err != nil || got.Name != tc.want || got.Method != "token"):
			t.Errorf("%s: %+v, %v; want token principal %q", tc.name, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		principal string
		need      Permission
		prefix    string
		want      bool
	}{
		{"billing", PermAcquire, "billing/invoices", true},
		{"billing", PermAcquire | PermRenew, "billing/", true},
		{"billing", PermWatch, "billing/invoices", false},
		{"billing", PermAcquire, "bill", false}, // a prefix wider than the rule's
		{"billing", PermRead, "public/x", true}, // "*"
		{"nobody", PermRead, "public/x", true},
		{"nobody", PermRead, "billing/x", false},
		{"root", PermOwner | PermReport, "anything", true}, // admin is every permission
	} {
		if got := p.Allowed(tc.principal, tc.need, tc.prefix); got != tc.want {
			t.Errorf("Allowed(%q, %v, %q) = %v, want %v", tc.principal, tc.need, tc.prefix, got, tc.want)
		}
	}
}

// A forwarded principal survives its header, whatever its name holds.
func TestForwardedPrincipalRoundTrip(t *testing.T) {
	for _, p := range []Principal{{Name: "billing", Method: "token"}, {Name: "CN=a b/c:d", Method: "certificate"}} {
		if got, err := DecodePrincipal(EncodePrincipal(p)); err != nil || got != p {
			t.Errorf("%+v came back as %+v, %v", p, got, err)
		}
	}
	for _, v := range []string{"", "token", "token:", ":name", "token:%zz"} {
		if _, err := DecodePrincipal(v); !errors.Is(err, ErrUnauthenticated) {
			t.Errorf("DecodePrincipal(%q) = %v, want ErrUnauthenticated", v, err)
		}
	}
}
