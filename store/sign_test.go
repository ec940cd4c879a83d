package store_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencehttp"
	"github.com/fencedio/fenced/internal/signtest"
	"github.com/fencedio/fenced/store"
)

// With a verifier, the store applies only writes whose token carries a
// valid signature; the others change neither the object nor the highest
// token.
func TestSignedWrites(t *testing.T) {
	dir := t.TempDir()
	var stores []*store.Store
	t.Cleanup(func() {
		for _, s := range stores {
			s.Close()
		}
	})
	var plain *store.Store
	// One process may hold the database: every write reopens it with the
	// verifier of the guard it stands for.
	open := func(v *fence.Verifier) *store.Store {
		for _, s := range stores {
			s.Close()
		}
		stores = nil
		s, err := store.Open(store.Config{DataDir: dir, Verifier: v})
		if err != nil {
			t.Fatal(err)
		}
		stores = append(stores, s)
		plain = s
		return s
	}
	signtest.CheckGuard(t, "orders/7", func(v *fence.Verifier) signtest.Mutate {
		return func(ctx context.Context, scope string, token uint64) (bool, error) {
			s := open(v)
			_, err := s.Put(ctx, scope, token, "obj", []byte("v"))
			return err == nil, err
		}
	}, func(ctx context.Context, scope string) (uint64, error) {
		return plain.Highest(ctx, scope)
	})
}

// Over HTTP the signature travels in Fencing-Token-Signature; a write
// without it is answered 403 with a bad-signature problem.
func TestSignedWritesOverHTTP(t *testing.T) {
	keys := signtest.NewKeys(t)
	s, err := store.Open(store.Config{DataDir: t.TempDir(), Verifier: keys.Verifier})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	put := func(sig string) *http.Response {
		req, _ := http.NewRequest(http.MethodPut, srv.URL+"/v1/objects/obj", strings.NewReader("v"))
		req.Header.Set(fencehttp.HeaderScope, "orders/7")
		req.Header.Set(fencehttp.HeaderToken, "5")
		if sig != "" {
			req.Header.Set(fencehttp.HeaderSignature, sig)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	resp := put("")
	p, err := fencehttp.DecodeProblem(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || err != nil || p.Type != fencehttp.ProblemBadSignature {
		t.Fatalf("unsigned PUT: %d %+v %v", resp.StatusCode, p, err)
	}
	if h, _ := s.Highest(context.Background(), "orders/7"); h != 0 {
		t.Fatalf("highest %d after a refused write", h)
	}
	resp = put(keys.New.Sign("orders/7", 5))
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("signed PUT: %d", resp.StatusCode)
	}
}

// Config.Authorize refuses writes with 401 or 403 before anything is
// written, and lets the others through.
func TestAuthorizedWrites(t *testing.T) {
	s, err := store.Open(store.Config{DataDir: t.TempDir(), Authorize: func(r *http.Request, scope string) error {
		switch r.Header.Get("Authorization") {
		case "":
			return store.ErrUnauthenticated
		case "Bearer writer":
			return nil
		}
		return errors.New("not this one") // anything else: forbidden
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	put := func(auth string, token int) int {
		req, _ := http.NewRequest(http.MethodPut, srv.URL+"/v1/objects/obj", strings.NewReader("v"))
		req.Header.Set(fencehttp.HeaderScope, "orders/7")
		req.Header.Set(fencehttp.HeaderToken, strconv.Itoa(token))
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for auth, want := range map[string]int{"": http.StatusUnauthorized, "Bearer other": http.StatusForbidden} {
		if code := put(auth, 9); code != want {
			t.Errorf("PUT with %q: %d, want %d", auth, code, want)
		}
	}
	if h, _ := s.Highest(context.Background(), "orders/7"); h != 0 {
		t.Fatalf("highest %d after refused writes", h)
	}
	if code := put("Bearer writer", 9); code != http.StatusNoContent {
		t.Fatalf("authorized PUT: %d", code)
	}
}
