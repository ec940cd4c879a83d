package store_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencehttp"
	"github.com/fencedio/fenced/internal/scopetest"
	"github.com/fencedio/fenced/store"
)

// The store applies fence.ValidateScope to Fencing-Scope, through its Go API
// and its HTTP front, and the same rule to object names: an invalid scope or
// name is refused (400 over HTTP) with nothing written.
func TestScopeRule(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, store.Config{})
	wantAudit := 0
	for i, tc := range scopetest.Cases {
		name := fmt.Sprintf("obj-%d", i)
		_, err := e.s.Put(ctx, tc.Scope, 1, name, []byte("go"))
		// Straight into the handler: net/http's client cannot send some of
		// these header values, other clients can.
		r := e.serve(http.MethodPut, "/v1/objects/"+name, fencing(tc.Scope, "2"), []byte("http"))
		_, nameErr := e.s.Get(ctx, tc.Scope)
		if tc.Valid {
			wantAudit += 2
			if err != nil || r.status != http.StatusNoContent {
				t.Errorf("%s: Put %v, PUT %d %s; want both accepted", tc.Name, err, r.status, r.body)
			}
			if !errors.Is(nameErr, store.ErrNotFound) {
				t.Errorf("%s: Get with the scope as a name = %v; want ErrNotFound", tc.Name, nameErr)
			}
			continue
		}
		if !errors.Is(err, fence.ErrInvalidScope) {
			t.Errorf("%s: Put = %v; want ErrInvalidScope", tc.Name, err)
		}
		if r.status != http.StatusBadRequest || r.problem(t)["type"] != fencehttp.ProblemInvalidScope {
			t.Errorf("%s: PUT %d %s; want 400 %s", tc.Name, r.status, r.body, fencehttp.ProblemInvalidScope)
		}
		if !errors.Is(nameErr, store.ErrInvalidName) {
			t.Errorf("%s: Get with the scope as a name = %v; want ErrInvalidName", tc.Name, nameErr)
		}
	}
	if n := len(e.audit()); n != wantAudit {
		t.Errorf("audit has %d records, want %d (the valid scopes' writes only)", n, wantAudit)
	}
}
