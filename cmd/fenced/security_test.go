package main

import (
	"errors"
	"fmt"
	"net/http/httptest"
	"testing"

	"github.com/fencedio/fenced/server"
	"github.com/fencedio/fenced/store"
)

// The reference store lets through writes of principals with acquire on
// the scope, and tells the unauthenticated from the forbidden.
func TestStoreAuthorize(t *testing.T) {
	pol, err := server.ParsePolicy(fmt.Appendf(nil, `{
  "tokens": [{"principal": "app", "sha256": %q}],
  "rules": [{"principal": "app", "prefix": "jobs/", "permissions": ["acquire"]}]}`, server.HashSecret("app-secret")))
	if err != nil {
		t.Fatal(err)
	}
	authorize := storeAuthorize(pol)
	for _, tc := range []struct {
		token, scope string
		want         error
	}{
		{"", "jobs/1", store.ErrUnauthenticated},
		{"wrong", "jobs/1", store.ErrUnauthenticated},
		{"app-secret", "other/1", store.ErrForbidden},
		{"app-secret", "jobs/1", nil},
	} {
		r := httptest.NewRequest("PUT", "/v1/objects/x", nil)
		if tc.token != "" {
			r.Header.Set("Authorization", "Bearer "+tc.token)
		}
		if err := authorize(r, tc.scope); !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("token %q scope %q: %v, want %v", tc.token, tc.scope, err, tc.want)
		}
	}
}
