// Package fencesql enforces fencing tokens in PostgreSQL, MySQL/MariaDB and
// SQLite, inside the same transaction as the writes they protect.
//
// It offers two patterns. Both work through database/sql, so one code path
// serves the three databases: open PostgreSQL with the pgx driver
// (github.com/jackc/pgx/v5/stdlib; a program built on a *pgxpool.Pool gets
// a *sql.DB over the same pool from stdlib.OpenDBFromPool), MySQL or
// MariaDB with github.com/go-sql-driver/mysql and SQLite with
// modernc.org/sqlite.
//
// # Scope table (Guard)
//
// A table holds, per scope (usually the lease key), the highest token
// accepted so far. Guard.Check runs inside the caller's transaction: it
// locks the scope's row, compares, and raises the highest token. The lock
// lasts until the transaction ends, so the caller's writes commit or roll
// back together with the token, and no other transaction can check or write
// under the same scope in between. Guard.Do wraps begin, check, callback and
// commit.
//
//	err := guard.Do(ctx, "orders/7", lease.Token(), func(ctx context.Context, tx *sql.Tx) error {
//		_, err := tx.ExecContext(ctx, `UPDATE orders SET status = $1 WHERE id = $2`, "paid", 7)
//		return err
//	})
//	if errors.Is(err, fence.ErrStaleToken) {
//		// Authority is lost: stop, do not retry with the same token.
//	}
//
// With a lease (a *client.Lease or any fence.Lease), Guard.DoLease takes the
// scope and token from it and calls its MarkLost on a stale rejection, so the
// lease's context is already cancelled when the error comes back
// (Guard.CheckLease and RowFence.UpdateLease likewise):
//
//	err := guard.DoLease(ctx, lease, func(ctx context.Context, tx *sql.Tx) error { ... })
//
// The table (default name fence_scopes; see CreateTableSQL and
// Guard.Migrate):
//
//	-- PostgreSQL
//	CREATE TABLE IF NOT EXISTS "fence_scopes" (
//	    scope          varchar(512) PRIMARY KEY,
//	    highest_token  bigint NOT NULL CHECK (highest_token >= 0),
//	    sequence_token bigint NOT NULL DEFAULT 0,
//	    last_sequence  bigint NOT NULL DEFAULT 0
//	)
//
//	-- MySQL / MariaDB
//	CREATE TABLE IF NOT EXISTS `fence_scopes` (
//	    scope          VARBINARY(512) NOT NULL PRIMARY KEY,
//	    highest_token  BIGINT NOT NULL,
//	    sequence_token BIGINT NOT NULL DEFAULT 0,
//	    last_sequence  BIGINT NOT NULL DEFAULT 0
//	) ENGINE=InnoDB
//
//	-- SQLite
//	CREATE TABLE IF NOT EXISTS "fence_scopes" (
//	    scope          TEXT NOT NULL PRIMARY KEY,
//	    highest_token  BIGINT NOT NULL,
//	    sequence_token BIGINT NOT NULL DEFAULT 0,
//	    last_sequence  BIGINT NOT NULL DEFAULT 0
//	) WITHOUT ROWID
//
// The two sequence columns serve writes that carry a sequence
// (fence.WithSequence; Config.StrictSequences): last_sequence is the last
// sequence accepted under highest_token when sequence_token equals it, 0
// otherwise. A sequence at or below it is a duplicate (fence.ErrDuplicate),
// refused and not applied. Writes without a sequence run the statements
// below and never touch these columns. Guard.Migrate adds them to a table
// created before they existed (MigrateSequenceSQL), and a guard that knows
// no sequences (an older Go, Python or TypeScript guard) keeps working on
// the migrated table: its inserts get the defaults, and its raising of
// highest_token leaves sequence_token behind, which ends the old epoch's
// sequences as the rule does. Such a guard ignores sequences, so it would
// apply a duplicate sent to it. See docs/guard-spec.md, section 7.
//
// On MySQL the scope is VARBINARY because the usual collations compare
// case-insensitively and ignore trailing spaces, which would make "Orders/7"
// and "orders/7 " one scope.
//
// What Check runs, with token t for scope s:
//
//	-- PostgreSQL
//	SELECT highest_token FROM fence_scopes WHERE scope = $1 FOR UPDATE
//	-- no row: INSERT ... VALUES ($1, $2) ON CONFLICT (scope) DO NOTHING
//	--         (0 rows: a concurrent transaction created it; read again)
//	-- t < highest: stale, nothing written
//	-- t > highest: UPDATE fence_scopes SET highest_token = $1 WHERE scope = $2
//
//	-- MySQL / MariaDB
//	INSERT INTO fence_scopes (scope, highest_token) VALUES (?, 0)
//	    ON DUPLICATE KEY UPDATE highest_token = highest_token   -- create or lock
//	SELECT highest_token FROM fence_scopes WHERE scope = ? FOR UPDATE
//	-- then compare and UPDATE as above
//
//	-- SQLite
//	INSERT INTO fence_scopes (scope, highest_token) VALUES (?, 0)
//	    ON CONFLICT (scope) DO NOTHING                          -- take the write lock
//	SELECT highest_token FROM fence_scopes WHERE scope = ?
//	-- then compare and UPDATE as above
//
// ExternalGuard adapts a Guard to fence.Guard for resources outside the
// database; its apply runs while the row is locked, but its effect is not
// atomic with the commit of the token (see ExternalGuard).
//
// # Row-level tokens (RowFence)
//
// When the protected data are rows that already exist, each row can carry
// its own token instead, in a column added with
//
//	ALTER TABLE orders ADD COLUMN fence_token BIGINT NOT NULL DEFAULT 0
//
// RowFence.Update then runs one statement (PostgreSQL shown; ? on the others)
//
//	UPDATE "orders" SET "status" = $1, "fence_token" = $2
//	WHERE "id" = $3 AND "fence_token" <= $2
//
// and, when no row matched, reads the row's token to return either
// ErrRowNotFound or a *fence.StaleTokenError. The update is atomic by
// itself and needs no transaction. Its scope is the row: a token fences
// updates of that row only. It cannot fence inserts (a stale client could
// create a row) or deletes (a deleted row forgets its token); use the scope
// table for those, or mark rows deleted with an update.
//
// # Guarantees
//
//   - A write made through Guard.Do, or in a transaction after Guard.Check
//     returned nil, commits only if no transaction that committed before it
//     accepted a higher token for the scope, and commits atomically with the
//     raised highest token (invariant I5). A transaction that rolls back or
//     whose client dies changes nothing; the database releases its lock.
//   - Stale tokens return *fence.StaleTokenError (errors.Is
//     fence.ErrStaleToken) with Highest read from the database; token 0
//     returns fence.ErrNoToken; tokens above math.MaxInt64 return
//     ErrTokenOutOfRange (which matches fence.ErrTokenOutOfRange, a client
//     error: fencehttp answers it with 400); in all three cases nothing
//     changes.
//   - A negative token found in the scope table or a RowFence row, which
//     no guard writes, returns ErrCorruptToken and nothing is written over
//     it.
//   - When the context ends during Do (before the commit is sent), the
//     error matches the context's error (errors.Is(err,
//     context.DeadlineExceeded) or context.Canceled) and says that the
//     transaction was rolled back, which it was: nothing of it committed.
//   - Equal tokens are accepted; scopes are independent.
//   - The highest token is exactly as durable as the database's commits.
//   - Table and column names are validated identifiers; every value is a
//     bind parameter.
//
// # Non-guarantees and caveats
//
//   - Only writes made in the checked transaction (or through RowFence) are
//     fenced. Writes that bypass the guard, in another transaction or
//     another table, are not.
//   - Check holds the scope's row lock until the caller's transaction ends;
//     transactions for one scope are serialized, and a slow transaction
//     delays the others. Checking several scopes in one transaction in
//     different orders can deadlock, like any row locks.
//   - Under PostgreSQL REPEATABLE READ or SERIALIZABLE, Check fails with a
//     serialization error (40001) when the row changed after the
//     transaction's snapshot. InnoDB may report a deadlock (1213) when the
//     caller's own statements lock rows in conflicting orders, and in rare
//     interleavings of its own; MariaDB with innodb_snapshot_isolation (the
//     default from 11.6) reports 1020 when the row changed after the
//     transaction's snapshot. SQLite reports SQLITE_BUSY when the busy
//     timeout expires, or at once when a transaction that already read
//     becomes a writer after another writer committed. In every such case
//     nothing was committed and the transaction must be rolled back (the
//     database may already have done so), so running the whole transaction
//     again is safe: Retryable recognizes these errors, and Config.Retries
//     makes Do retry them. Lock wait timeouts are retried the same way:
//     PostgreSQL's lock_timeout (55P03) and InnoDB's
//     innodb_lock_wait_timeout (1205, after which Do rolls back the
//     transaction that MySQL left open). Retries wait with exponential
//     backoff and jitter (Config.RetryBackoff, 10ms by default, doubling up
//     to Config.MaxRetryBackoff, 1s), so that colliding transactions spread
//     out instead of colliding again at once, and stop when the context
//     ends. Check avoids the usual causes itself: it reads
//     with locks, so the default isolation levels (READ COMMITTED on
//     PostgreSQL, REPEATABLE READ on MySQL) give no serialization errors;
//     on MySQL it takes no gap locks, so creating new scopes concurrently
//     does not deadlock; on SQLite it writes before it reads.
//   - SQLite needs a busy timeout for concurrent writers, for instance the
//     DSN "file:app.db?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)".
//     Without one, a second writer fails at once with SQLITE_BUSY. Calling
//     Check first in the transaction, or beginning transactions with the
//     DSN option _txlock=immediate, avoids the immediate SQLITE_BUSY of a
//     reader turning writer.
//   - The scope table keeps one row per scope forever. Deleting a row
//     forgets its highest token and lets older tokens through again; prune
//     only scopes whose lease keys can never be used again.
//   - A commit that fails without the database saying it aborted the
//     transaction has an unknown outcome, and Do's error matches
//     ErrCommitUnknown: the writes and the token are then either both
//     committed or both not. That is a broken connection, and a context
//     that ends while COMMIT runs: pgx gives up on COMMIT's reply at the
//     deadline, after the database may have committed. Only a context
//     that ended before Do sent COMMIT is a certain rollback. (MySQL's
//     driver waits for COMMIT's reply whatever the context; SQLite's
//     commits in process and rolls a failed COMMIT back, but Do cannot
//     tell its errors from another driver's and reports them as unknown
//     too.)
//   - Check cannot report acceptances to the Observer, since the caller
//     commits; Do and ExternalGuard.Do report them after the commit.
//   - Tokens are not tied to leases here: the guard trusts the token order
//     that the lease service provides.
package fencesql
