package fencesql_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencehttp"
	"github.com/fencedio/fenced/fence/fencesql"
)

// TestTxGuardBehindMiddleware runs fencehttp.Middleware with TxGuard on
// every database: the handler writes through the guard's transaction, so a
// handler that fails rolls back its write and the token together, and a
// stale request never reaches it.
func TestTxGuardBehindMiddleware(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		db, _ := openDB(t, b)
		g := newGuard(t, db, b.dialect, fencesql.Config{})
		w := newWritesTable(t, db, b.dialect)
		scope := uniqueName("invoices")
		var calls int
		h := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			calls++
			tx, ok := fencesql.TxFromContext(r.Context())
			sc, _ := fencehttp.ScopeFromContext(r.Context())
			tok, _ := fencehttp.TokenFromContext(r.Context())
			if !ok {
				http.Error(rw, "no transaction", http.StatusInternalServerError)
				return
			}
			if err := w.insert(r.Context(), tx, sc, tok); err != nil {
				http.Error(rw, err.Error(), http.StatusInternalServerError)
				return
			}
			if r.URL.Query().Has("fail") {
				http.Error(rw, "handler failed after writing", http.StatusInternalServerError)
				return
			}
			rw.WriteHeader(http.StatusNoContent)
		})
		srv := httptest.NewServer(fencehttp.Middleware(g.TxGuard(), fencehttp.Config{})(h))
		t.Cleanup(srv.Close)
		put := func(token uint64, query string) int {
			t.Helper()
			req, _ := http.NewRequest(http.MethodPut, srv.URL+"/"+query, nil)
			req.Header.Set(fencehttp.HeaderScope, scope)
			req.Header.Set(fencehttp.HeaderToken, strconv.FormatUint(token, 10))
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp.StatusCode
		}

		if code := put(5, ""); code != http.StatusNoContent {
			t.Fatalf("PUT token 5: %d", code)
		}
		if code := put(9, "?fail"); code != http.StatusInternalServerError {
			t.Fatalf("failing PUT token 9: %d", code)
		}
		if n := w.count(t, db, scope, 9); n != 0 || mustHighest(t, g, scope) != 5 {
			t.Fatalf("failed handler: %d writes with token 9, highest %d; want 0 and 5 (rolled back together)", n, mustHighest(t, g, scope))
		}
		if code := put(7, ""); code != http.StatusNoContent {
			t.Fatalf("PUT token 7: %d", code)
		}
		before := calls
		if code := put(6, ""); code != http.StatusConflict {
			t.Fatalf("PUT stale token 6: %d, want 409", code)
		}
		if calls != before {
			t.Fatal("stale request reached the handler")
		}
		ws := w.all(t, db)
		if len(ws) != 2 || ws[0].token != 5 || ws[1].token != 7 || ws[0].scope != scope {
			t.Fatalf("writes %+v, want tokens 5 and 7 in %q", ws, scope)
		}
		if mustHighest(t, g, scope) != 7 {
			t.Fatalf("highest %d, want 7", mustHighest(t, g, scope))
		}

		// Used directly, outside HTTP: the transaction is in apply's context.
		var stale *fence.StaleTokenError
		err := g.TxGuard().Do(context.Background(), scope, 3, func(context.Context) error { return nil })
		if !errors.As(err, &stale) || stale.Highest != 7 {
			t.Fatalf("TxGuard.Do with token 3: %v, want stale", err)
		}
		if _, ok := fencesql.TxFromContext(context.Background()); ok {
			t.Fatal("TxFromContext outside a call: ok")
		}
	})
}
