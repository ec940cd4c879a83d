// Package invoicejob is the worked example of docs/guards.md, as code that
// compiles and a test that runs it against fenced, PostgreSQL and Redis: a
// nightly job that bills customers while it holds a fenced lease, and the
// invoice API it calls. The guide shows the part between "guide begin"
// and "guide end" verbatim; a test keeps the two identical.
package invoicejob

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"time"

	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencehttp"
	"github.com/fencedio/fenced/fence/fenceredis"
	"github.com/fencedio/fenced/fence/fencesql"
)

// guide begin

// Migrate creates the guard's scope table and the invoices table.
func Migrate(ctx context.Context, db *sql.DB, guard *fencesql.Guard) error {
	if err := guard.Migrate(ctx); err != nil {
		return err
	}
	_, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS invoices (
		id         bigint PRIMARY KEY,
		cents      bigint NOT NULL,
		sent_token bigint)`)
	return err
}

// API is the invoice service: PUT /invoices/{id}/sent marks an invoice sent.
// Behind fencehttp.Middleware with guard.TxGuard(), the handler runs inside
// the guard's transaction: the token check and its UPDATE commit together.
func API(guard *fencesql.Guard) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /invoices/{id}/sent", func(w http.ResponseWriter, r *http.Request) {
		tx, _ := fencesql.TxFromContext(r.Context())
		token, _ := fencehttp.TokenFromContext(r.Context())
		_, err := tx.ExecContext(r.Context(),
			`UPDATE invoices SET sent_token = $1 WHERE id = $2`, int64(token), r.PathValue("id"))
		if err != nil {
			http.Error(w, "cannot mark the invoice sent", http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	return fencehttp.Middleware(guard.TxGuard(), fencehttp.Config{})(mux)
}

// Run is one night's run: wait in line for the lease, then bill.
func Run(ctx context.Context, c *client.Client, key string, invoices map[int64]int64,
	guard *fencesql.Guard, counters *fenceredis.Guard, apiURL string) error {
	l, err := c.Acquire(ctx, key, client.WithWait(time.Minute))
	if err != nil {
		return err // *client.HeldError if the wait ran out
	}
	defer l.Release(context.Background())
	return Bill(l.Context(), l, invoices, guard, counters, apiURL)
}

// Bill writes the invoices (id -> cents), sends each through the API and
// counts it in Redis, every write fenced with l's token. The lease-taking
// calls tell l when a resource finds its token stale (l.MarkLost), which cancels
// l.Context(); Bill then stops and does not retry.
func Bill(ctx context.Context, l fence.Lease, invoices map[int64]int64,
	guard *fencesql.Guard, counters *fenceredis.Guard, apiURL string) error {
	err := guard.DoLease(ctx, l, func(ctx context.Context, tx *sql.Tx) error {
		for id, cents := range invoices {
			_, err := tx.ExecContext(ctx, `INSERT INTO invoices (id, cents) VALUES ($1, $2)
				ON CONFLICT (id) DO UPDATE SET cents = excluded.cents`, id, cents)
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err // errors.Is(err, fence.ErrStaleToken): someone newer holds the key
	}
	api := &http.Client{Transport: fencehttp.NewTransport(l, nil)}
	sent := counters.WithLease(l)
	for id := range invoices {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPut, fmt.Sprintf("%s/invoices/%d/sent", apiURL, id), nil)
		resp, err := api.Do(req)
		if err != nil {
			return err
		}
		stale, isStale := fencehttp.StaleFromResponse(resp)
		resp.Body.Close()
		if isStale {
			return stale // the Transport has called l.MarkLost already
		}
		if resp.StatusCode != http.StatusNoContent {
			return fmt.Errorf("invoice %d: %s", id, resp.Status)
		}
		if _, err := sent.Incr(ctx, sent.Key("sent")); err != nil {
			return err
		}
	}
	return nil
}

// guide end
