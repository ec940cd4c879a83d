package fencesql

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/fencedio/fenced/fence"
)

// ErrTokenOutOfRange is returned for a token above math.MaxInt64. Every
// supported database stores the token in a signed 64-bit BIGINT, so such a
// token cannot be recorded; it is refused before any statement runs and
// nothing changes. It matches fence.ErrTokenOutOfRange, which HTTP and RPC
// fronts answer as a client error.
var ErrTokenOutOfRange error = tokenOutOfRange{}

type tokenOutOfRange struct{}

func (tokenOutOfRange) Error() string {
	return "fencesql: fencing token out of range (a BIGINT holds at most " + strconv.FormatInt(math.MaxInt64, 10) + ")"
}

// Is makes errors.Is(err, fence.ErrTokenOutOfRange) true.
func (tokenOutOfRange) Is(target error) bool { return target == fence.ErrTokenOutOfRange }

// ErrCorruptToken is matched by the error a guard returns when the token
// stored in the database is negative. No guard writes one, so the row was
// changed by something else and its token cannot be trusted; nothing is
// written over it. Repair the row (set the token to at least the highest
// token ever issued for it) before writing again.
var ErrCorruptToken = errors.New("fencesql: negative fencing token stored in the database")

// ErrCommitUnknown is matched by the error of a Do whose commit failed in a
// way that does not tell whether it took effect: the connection broke, or
// the context ended while COMMIT ran (the error then matches the
// context's error too). The writes and the new highest token are either
// both committed or both not; read them back to know. Do does not retry
// it; with a sequence (fence.WithSequence), fence.Retry can, since it
// matches fence.ErrUnknownOutcome.
var ErrCommitUnknown error = &unknownCommit{}

type unknownCommit struct{}

func (*unknownCommit) Error() string { return "fencesql: commit outcome unknown" }

// Is makes ErrCommitUnknown match fence.ErrUnknownOutcome.
func (*unknownCommit) Is(target error) bool { return target == fence.ErrUnknownOutcome }

// ErrRowNotFound is returned by RowFence.Update when no row has the given id.
// It is not a stale-token rejection: the caller decides whether a missing
// row is an error.
var ErrRowNotFound = errors.New("fencesql: row not found")

// validate applies the rules every guard shares (fence.Check, whose scope
// rule keeps NUL, which PostgreSQL text cannot hold, and scopes longer than
// the column out) plus the token range of SQL storage, and converts the
// token for binding.
func validate(ctx context.Context, scope string, token uint64) (int64, error) {
	if err := fence.CheckSequence(scope, token, fence.SequenceFromContext(ctx), 0, 0, false); err != nil {
		return 0, err
	}
	return tokenParam(token)
}

func tokenParam(token uint64) (int64, error) {
	if token == 0 {
		return 0, fence.ErrNoToken
	}
	if token > math.MaxInt64 {
		return 0, fmt.Errorf("%w: %d", ErrTokenOutOfRange, token)
	}
	return int64(token), nil
}

// tokenFromDB converts a stored BIGINT back to a token.
func tokenFromDB(v int64) (uint64, error) {
	if v < 0 {
		return 0, fmt.Errorf("%w: %d", ErrCorruptToken, v)
	}
	return uint64(v), nil
}

// Retryable reports whether err means that the database aborted the
// transaction (or the statement) because of contention, so that rolling the
// transaction back and running it again from the start is safe and may
// succeed: a PostgreSQL serialization failure (40001), deadlock (40P01) or
// lock timeout (55P03, lock_timeout or NOWAIT), a MySQL or MariaDB deadlock
// (1213), lock wait timeout (1205, innodb_lock_wait_timeout) or MariaDB's
// "record has changed since last read" (1020, raised under
// innodb_snapshot_isolation), or SQLite busy/locked (SQLITE_BUSY,
// SQLITE_LOCKED and their extended codes). After a lock wait timeout MySQL
// rolls back only the statement, not the transaction; Do rolls the whole
// transaction back before it retries, and so must a caller of Check.
// Stale-token errors are never retryable.
func Retryable(err error) bool {
	if err == nil || errors.Is(err, fence.ErrStaleToken) {
		return false
	}
	var pg interface{ SQLState() string }
	if errors.As(err, &pg) {
		switch pg.SQLState() {
		case "40001", "40P01", "55P03":
			return true
		}
		return false
	}
	if n, ok := mysqlErrorNumber(err); ok {
		return n == 1213 || n == 1205 || n == 1020
	}
	// modernc.org/sqlite's *sqlite.Error; matched by method so that this
	// package does not link the SQLite engine into programs that never use it.
	var lite interface{ Code() int }
	if errors.As(err, &lite) {
		switch lite.Code() & 0xff {
		case 5, 6: // SQLITE_BUSY, SQLITE_LOCKED
			return true
		}
	}
	return false
}
