package fencesql

import (
	"context"
	"database/sql"

	"github.com/fencedio/fenced/fence"
)

// External returns a fence.Guard that keeps its highest tokens in g's table
// but protects a resource outside the database. See ExternalGuard.
func (g *Guard) External() *ExternalGuard { return &ExternalGuard{g: g} }

// ExternalGuard adapts a Guard to fence.Guard for mutations that do not go
// through the database, for instance a file or a remote API, when the
// tokens should live in a shared database. Do begins a transaction, checks
// the token (locking the scope's row), runs apply while the row stays
// locked, and commits the new highest token only if apply succeeded. Calls
// for one scope are therefore serialized across every process using the
// table.
//
// Unlike Guard.Do, apply's effect and the token are not atomic: if the
// commit fails after apply succeeded, the effect stands while the token may
// not be recorded, and a later token between the old highest and this one
// would still be accepted. Do returns the commit error in that case. Prefer
// Guard.Do when the protected data is in the same database.
type ExternalGuard struct{ g *Guard }

var _ fence.Guard = (*ExternalGuard)(nil)

// Do implements fence.Guard. A transaction that fails with a Retryable error
// before apply runs is retried as Config.Retries allows; once apply has run,
// never.
func (e *ExternalGuard) Do(ctx context.Context, scope string, token uint64, apply func(ctx context.Context) error) error {
	tok, err := validate(ctx, scope, token)
	if err != nil {
		return err
	}
	fn := func(ctx context.Context, _ *sql.Tx) error { return apply(ctx) }
	for attempt := 0; ; attempt++ {
		called, err := e.g.attempt(ctx, scope, tok, fn)
		if err == nil || called {
			return err
		}
		if err := e.g.retry(ctx, attempt, err); err != nil {
			return err
		}
	}
}

// Highest implements fence.Guard.
func (e *ExternalGuard) Highest(ctx context.Context, scope string) (uint64, error) {
	return e.g.Highest(ctx, scope)
}
