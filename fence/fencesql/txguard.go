package fencesql

import (
	"context"
	"database/sql"

	"github.com/fencedio/fenced/fence"
)

// TxGuard returns a fence.Guard whose Do runs apply inside one of g's
// transactions, after the token check, with that transaction in apply's
// context: TxFromContext returns it. Writes made through it commit
// atomically with the new highest token, exactly as with Guard.Do.
//
// It is the guard to put behind a middleware that takes a fence.Guard, such
// as fencehttp.Middleware or fenceconnect.NewInterceptor, when the service
// keeps its data in the same database: the handler runs inside the
// transaction and writes through it.
//
//	mw := fencehttp.Middleware(guard.TxGuard(), fencehttp.Config{})
//	// in the handler:
//	tx, _ := fencesql.TxFromContext(r.Context())
//	_, err := tx.ExecContext(r.Context(), `UPDATE invoices SET ...`)
//
// The transaction commits when apply returns nil (for the middleware: the
// handler's status is not a failure) and rolls back otherwise. Unlike
// Guard.Do, a Retryable failure is retried (as Config.Retries allows) only
// before apply runs, never after: a handler cannot be run twice.
func (g *Guard) TxGuard() *TxContextGuard { return &TxContextGuard{g: g} }

// TxContextGuard is the fence.Guard returned by Guard.TxGuard.
type TxContextGuard struct{ g *Guard }

var _ fence.Guard = (*TxContextGuard)(nil)

type txKey struct{}

// TxFromContext returns the transaction that a TxContextGuard opened for the
// call whose context ctx is (or derives from). apply must use it for the
// writes that the token protects, and must not commit or roll it back.
func TxFromContext(ctx context.Context) (*sql.Tx, bool) {
	tx, ok := ctx.Value(txKey{}).(*sql.Tx)
	return tx, ok
}

// Do implements fence.Guard; see Guard.TxGuard.
func (t *TxContextGuard) Do(ctx context.Context, scope string, token uint64, apply func(ctx context.Context) error) error {
	tok, err := validate(ctx, scope, token)
	if err != nil {
		return err
	}
	fn := func(ctx context.Context, tx *sql.Tx) error {
		return apply(context.WithValue(ctx, txKey{}, tx))
	}
	for attempt := 0; ; attempt++ {
		called, err := t.g.attempt(ctx, scope, tok, fn)
		if err == nil || called || !Retryable(err) || attempt >= t.g.cfg.Retries || ctx.Err() != nil {
			return err
		}
	}
}

// Highest implements fence.Guard.
func (t *TxContextGuard) Highest(ctx context.Context, scope string) (uint64, error) {
	return t.g.Highest(ctx, scope)
}
