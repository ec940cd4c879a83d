package fencesql

import (
	"context"
	"database/sql"

	"github.com/fencedio/fenced/fence"
)

// DoLease is Do for a lease: the lease's key is the scope and its token the
// token. When the token is stale (the guard's check, or an error of fn that
// matches fence.ErrStaleToken, such as a RowFence rejection inside fn) it
// calls l.MarkLost with the rejection before returning it, so the lease's
// context is cancelled and the holder stops (invariant I7).
func (g *Guard) DoLease(ctx context.Context, l fence.Lease, fn func(ctx context.Context, tx *sql.Tx) error) error {
	return fence.ReportStale(l, g.Do(fence.LeaseContext(ctx, l), l.Key(), l.Token(), fn))
}

// CheckLease is Check for a lease, inside the caller's transaction tx: the
// lease's key is the scope and its token the token, and a stale rejection
// calls l.MarkLost before it is returned. As after Check, the caller must roll
// tx back after any error.
func (g *Guard) CheckLease(ctx context.Context, tx *sql.Tx, l fence.Lease) error {
	return fence.ReportStale(l, g.Check(fence.LeaseContext(ctx, l), tx, l.Key(), l.Token()))
}

// UpdateLease is Update with the lease's token; a stale rejection calls
// l.MarkLost before it is returned. The row's scope is still "table/id", not
// the lease key: RowFence fences rows, whoever holds them.
func (r *RowFence) UpdateLease(ctx context.Context, q Querier, id any, l fence.Lease, set ...Assignment) error {
	return fence.ReportStale(l, r.Update(fence.LeaseContext(ctx, l), q, id, l.Token(), set...))
}
