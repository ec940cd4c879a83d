package fencesql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/fencedio/fenced/fence"
)

// Guard enforces fencing tokens with a scope table in a SQL database: one
// row per scope holding the highest token accepted for it. A Guard is safe
// for concurrent use; it holds no state besides its configuration, so any
// number of processes may guard the same table.
type Guard struct {
	db  *sql.DB
	cfg Config

	createSQL  string
	lockSQL    string // PostgreSQL: read and lock the row
	insertSQL  string // PostgreSQL: create the row with the token
	ensureSQL  string // MySQL, SQLite: create or lock the row before reading it
	readSQL    string // MySQL, SQLite: read the row (locked by ensureSQL)
	raiseSQL   string
	highestSQL string

	// Sequenced writes (fence.WithSequence) read and write the sequence
	// columns too; writes without a sequence run only the statements above.
	seqLockSQL   string // PostgreSQL
	seqInsertSQL string // PostgreSQL
	seqReadSQL   string // MySQL, SQLite (after ensureSQL)
	seqRaiseSQL  string
	migrateSQL   []string
	table        string // quoted
}

// New returns a Guard for the scope table in db. It does not touch the
// database; call Migrate, or create the table with CreateTableSQL.
func New(db *sql.DB, cfg Config) (*Guard, error) {
	if db == nil {
		return nil, errors.New("fencesql: nil *sql.DB")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Table == "" {
		cfg.Table = DefaultTable
	}
	d := cfg.Dialect
	t, _ := d.quoteTable(cfg.Table) // checked by Validate
	create, _ := CreateTableSQL(d, cfg.Table)
	migrate, _ := MigrateSequenceSQL(d, cfg.Table)
	g := &Guard{
		db:         db,
		cfg:        cfg,
		createSQL:  create,
		raiseSQL:   "UPDATE " + t + " SET highest_token = " + d.placeholder(1) + " WHERE scope = " + d.placeholder(2),
		highestSQL: "SELECT highest_token FROM " + t + " WHERE scope = " + d.placeholder(1),
		seqRaiseSQL: "UPDATE " + t + " SET highest_token = " + d.placeholder(1) + ", sequence_token = " + d.placeholder(2) +
			", last_sequence = " + d.placeholder(3) + " WHERE scope = " + d.placeholder(4),
		table:      t,
		migrateSQL: migrate,
	}
	seqCols := "highest_token, sequence_token, last_sequence"
	if d == Postgres {
		g.seqLockSQL = "SELECT " + seqCols + " FROM " + t + " WHERE scope = $1 FOR UPDATE"
		g.seqInsertSQL = "INSERT INTO " + t + " (scope, " + seqCols + ") VALUES ($1, $2, $2, $3) ON CONFLICT (scope) DO NOTHING"
	} else {
		g.seqReadSQL = "SELECT " + seqCols + " FROM " + t + " WHERE scope = ?"
		if d == MySQL {
			g.seqReadSQL += " FOR UPDATE"
		}
	}
	switch d {
	case Postgres:
		// SELECT ... FOR UPDATE first: for an existing scope, the common
		// case, one statement both reads and locks. PostgreSQL takes no gap
		// locks, so a miss costs nothing; the INSERT then waits for any
		// concurrent creator of the same scope and reports 0 rows if it won.
		g.lockSQL = "SELECT highest_token FROM " + t + " WHERE scope = $1 FOR UPDATE"
		g.insertSQL = "INSERT INTO " + t + " (scope, highest_token) VALUES ($1, $2) ON CONFLICT (scope) DO NOTHING"
	case MySQL:
		// A locking read of a missing key takes a gap lock under REPEATABLE
		// READ, and two transactions that both miss and then insert into the
		// same gap deadlock. Creating-or-locking the row first takes only a
		// record lock (the primary key is unique), so new scopes created
		// concurrently do not deadlock. The no-op update still locks the row.
		g.ensureSQL = "INSERT INTO " + t + " (scope, highest_token) VALUES (?, 0) ON DUPLICATE KEY UPDATE highest_token = highest_token"
		// A locking read sees the latest committed row, not the REPEATABLE
		// READ snapshot, which may predate the last accepted token.
		g.readSQL = "SELECT highest_token FROM " + t + " WHERE scope = ? FOR UPDATE"
	case SQLite:
		// SQLite locks the whole database for writing. Writing first makes
		// the transaction a writer before it reads, so no other writer can
		// change the row between the read and the update; a transaction whose
		// earlier reads are outdated gets SQLITE_BUSY here instead of a stale
		// answer.
		g.ensureSQL = "INSERT INTO " + t + " (scope, highest_token) VALUES (?, 0) ON CONFLICT (scope) DO NOTHING"
		g.readSQL = "SELECT highest_token FROM " + t + " WHERE scope = ?"
	}
	return g, nil
}

// Dialect returns the guard's dialect.
func (g *Guard) Dialect() Dialect { return g.cfg.Dialect }

// Table returns the scope table's name.
func (g *Guard) Table() string { return g.cfg.Table }

// CreateTableSQL returns the statement Migrate runs.
func (g *Guard) CreateTableSQL() string { return g.createSQL }

// Migrate creates the scope table if it does not exist, and adds the
// sequence columns to a table created without them (MigrateSequenceSQL). It
// is safe to run from several processes at once, and while guards of any
// version use the table (see the package documentation).
func (g *Guard) Migrate(ctx context.Context) error {
	if _, err := g.db.ExecContext(ctx, g.createSQL); err != nil {
		return fmt.Errorf("fencesql: create table %s: %w", g.cfg.Table, err)
	}
	for i, stmt := range g.migrateSQL {
		col := SequenceColumns[i]
		if g.hasColumn(ctx, col) {
			continue
		}
		// A concurrent Migrate may add the column first: then this one
		// fails, and the column is there.
		if _, err := g.db.ExecContext(ctx, stmt); err != nil && !g.hasColumn(ctx, col) {
			return fmt.Errorf("fencesql: add column %s to %s: %w", col, g.cfg.Table, err)
		}
	}
	return nil
}

// hasColumn reports whether the scope table has column col.
func (g *Guard) hasColumn(ctx context.Context, col string) bool {
	rows, err := g.db.QueryContext(ctx, "SELECT "+col+" FROM "+g.table+" WHERE 1 = 0")
	if err != nil {
		return false
	}
	return rows.Close() == nil
}

// Check decides, inside the caller's transaction tx, whether token may write
// to scope, and if so raises the scope's highest token to token.
//
// On success the scope's row stays locked until tx commits or rolls back,
// so no other Check of the scope (and no other write under it) can pass
// in between, and the caller's own writes in tx commit or roll back together
// with the new highest token. A token lower than the highest returns a
// *fence.StaleTokenError with the highest read from the table; token 0
// returns fence.ErrNoToken, a token above math.MaxInt64 ErrTokenOutOfRange,
// and a bad scope fence.ErrInvalidScope, all before any statement runs.
//
// After any error the caller must roll tx back (after a stale token nothing
// was changed, but the row stays locked until the transaction ends). Errors
// for which Retryable is true mean the database aborted the transaction;
// run it again from the start.
func (g *Guard) Check(ctx context.Context, tx *sql.Tx, scope string, token uint64) error {
	tok, err := g.validate(ctx, scope, token)
	if err != nil {
		return err
	}
	highest, err := g.check(ctx, tx, scope, tok)
	g.observeRefusal(ctx, scope, uint64(tok), highest, err)
	return err
}

// validate checks scope and token, and the token's signature with a
// Verifier.
func (g *Guard) validate(ctx context.Context, scope string, token uint64) (int64, error) {
	tok, err := validate(ctx, scope, token)
	if err != nil || g.cfg.Verifier == nil {
		return tok, err
	}
	return tok, g.cfg.Verifier.Verify(scope, token, fence.SignatureFrom(ctx))
}

// check returns the highest token before this check. A write with a
// sequence in ctx goes to checkSequence; one without runs the statements it
// always has.
func (g *Guard) check(ctx context.Context, tx *sql.Tx, scope string, tok int64) (uint64, error) {
	if tx == nil {
		return 0, errors.New("fencesql: nil *sql.Tx")
	}
	if seq := fence.SequenceFromContext(ctx); seq != 0 {
		return g.checkSequence(ctx, tx, scope, tok, int64(seq))
	}
	if g.cfg.Dialect != Postgres {
		if _, err := tx.ExecContext(ctx, g.ensureSQL, scope); err != nil {
			return 0, fmt.Errorf("fencesql: lock scope %q: %w", scope, err)
		}
		var h int64
		if err := tx.QueryRowContext(ctx, g.readSQL, scope).Scan(&h); err != nil {
			return 0, fmt.Errorf("fencesql: read scope %q: %w", scope, err)
		}
		return g.raise(ctx, tx, scope, tok, h)
	}
	// A miss followed by a lost insert race means that a concurrent
	// transaction created the row and committed; the next read sees it. More
	// than a few rounds only happen if rows are deleted concurrently.
	for range 3 {
		var h int64
		err := tx.QueryRowContext(ctx, g.lockSQL, scope).Scan(&h)
		if err == nil {
			return g.raise(ctx, tx, scope, tok, h)
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return 0, fmt.Errorf("fencesql: lock scope %q: %w", scope, err)
		}
		res, err := tx.ExecContext(ctx, g.insertSQL, scope, tok)
		if err != nil {
			return 0, fmt.Errorf("fencesql: create scope %q: %w", scope, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return 0, fmt.Errorf("fencesql: create scope %q: %w", scope, err)
		}
		if n == 1 {
			return 0, nil
		}
	}
	return 0, fmt.Errorf("fencesql: scope %q row keeps disappearing (deleted concurrently?)", scope)
}

// checkSequence is check for a write with sequence seq: the same locking
// statements, reading and writing the sequence columns as well.
func (g *Guard) checkSequence(ctx context.Context, tx *sql.Tx, scope string, tok, seq int64) (uint64, error) {
	var h, st, last int64
	if g.cfg.Dialect != Postgres {
		if _, err := tx.ExecContext(ctx, g.ensureSQL, scope); err != nil {
			return 0, fmt.Errorf("fencesql: lock scope %q: %w", scope, err)
		}
		if err := tx.QueryRowContext(ctx, g.seqReadSQL, scope).Scan(&h, &st, &last); err != nil {
			return 0, fmt.Errorf("fencesql: read scope %q: %w", scope, err)
		}
		return g.raiseSequence(ctx, tx, scope, tok, seq, h, st, last)
	}
	for range 3 {
		err := tx.QueryRowContext(ctx, g.seqLockSQL, scope).Scan(&h, &st, &last)
		if err == nil {
			return g.raiseSequence(ctx, tx, scope, tok, seq, h, st, last)
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return 0, fmt.Errorf("fencesql: lock scope %q: %w", scope, err)
		}
		res, err := tx.ExecContext(ctx, g.seqInsertSQL, scope, tok, seq)
		if err != nil {
			return 0, fmt.Errorf("fencesql: create scope %q: %w", scope, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return 0, fmt.Errorf("fencesql: create scope %q: %w", scope, err)
		}
		if n == 1 {
			return 0, nil
		}
	}
	return 0, fmt.Errorf("fencesql: scope %q row keeps disappearing (deleted concurrently?)", scope)
}

// raiseSequence decides a sequenced write over the locked row (highest h,
// sequence token st, last sequence last) and records it. last counts only
// when st == h: a guard without sequences raises h and leaves st behind.
func (g *Guard) raiseSequence(ctx context.Context, tx *sql.Tx, scope string, tok, seq, h, st, last int64) (uint64, error) {
	highest, err := tokenFromDB(h)
	if err != nil {
		return 0, err
	}
	if st != h || last < 0 {
		last = 0
	}
	if err := fence.CheckSequence(scope, uint64(tok), uint64(seq), highest, uint64(last), g.cfg.StrictSequences); err != nil {
		return highest, err
	}
	if _, err := tx.ExecContext(ctx, g.seqRaiseSQL, tok, tok, seq, scope); err != nil {
		return highest, fmt.Errorf("fencesql: record scope %q token %d sequence %d: %w", scope, tok, seq, err)
	}
	return highest, nil
}

// raise compares tok with the locked row's highest h and raises it.
func (g *Guard) raise(ctx context.Context, tx *sql.Tx, scope string, tok, h int64) (uint64, error) {
	highest, err := tokenFromDB(h)
	if err != nil {
		return 0, err
	}
	if err := fence.Check(scope, uint64(tok), highest); err != nil {
		return highest, err
	}
	if tok > h {
		if _, err := tx.ExecContext(ctx, g.raiseSQL, tok, scope); err != nil {
			return highest, fmt.Errorf("fencesql: raise scope %q to %d: %w", scope, tok, err)
		}
	}
	return highest, nil
}

// Do runs fn in a new transaction after Check accepted token for scope, and
// commits. The transaction is rolled back if the check, fn or the commit
// fails, and fn's error is returned as is. fn must use tx for the writes
// that the token protects; they commit atomically with the new highest
// token. fn must not commit or roll back tx.
//
// A commit error that does not say the database aborted the transaction
// leaves the outcome unknown and matches ErrCommitUnknown: the connection
// broke, or ctx ended while COMMIT ran. The writes and the token are then
// committed or not, always together. Only a ctx that ended before the
// commit was sent is a certain rollback.
func (g *Guard) Do(ctx context.Context, scope string, token uint64, fn func(ctx context.Context, tx *sql.Tx) error) error {
	tok, err := g.validate(ctx, scope, token)
	if err != nil {
		return err
	}
	var retried error // the last retryable failure
	for attempt := 0; ; attempt++ {
		_, err := g.attempt(ctx, scope, tok, fn)
		if err == nil {
			return nil
		}
		if retried != nil && ctx.Err() != nil && !Retryable(err) {
			// The context ended inside an attempt that followed retryable
			// failures: say what was being retried, not only the deadline.
			err = fmt.Errorf("%w; the attempts before it failed with: %w", err, retried)
		}
		if err := g.retry(ctx, attempt, err); err != nil {
			return err
		}
		retried = err
	}
}

// attempt runs one transaction, reports the decision once it is final and
// tells whether fn was called.
func (g *Guard) attempt(ctx context.Context, scope string, tok int64, fn func(context.Context, *sql.Tx) error) (called bool, err error) {
	var (
		highest uint64
		refused error // the check's refusal
	)
	defer func() {
		// Deferred so that it runs after the rollback below: observers are
		// told of a decision only once no lock is held.
		switch {
		case err == nil:
			g.observe(ctx, fence.Decision{Scope: scope, Presented: uint64(tok), Highest: highest, Accepted: true})
		case refused != nil:
			g.observeRefusal(ctx, scope, uint64(tok), highest, refused)
		}
	}()
	tx, err := g.db.BeginTx(ctx, g.cfg.TxOptions)
	if err != nil {
		return false, rolledBack(ctx, scope, tok, fmt.Errorf("fencesql: begin: %w", err))
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it only reports sql.ErrTxDone
	highest, err = g.check(ctx, tx, scope, tok)
	if err != nil {
		if refusal(err) {
			refused = err
			return false, err
		}
		return false, rolledBack(ctx, scope, tok, err)
	}
	if err := fn(ctx, tx); err != nil {
		return true, rolledBack(ctx, scope, tok, err)
	}
	// ctx.Err, unlike a receive from ctx.Done, returns only once the
	// cancellation has reached the transaction's own context: without this
	// check, fn returning right after ctx.Done could still commit.
	if ctx.Err() != nil {
		return true, fmt.Errorf("fencesql: scope %q token %d: %w before commit; the transaction was rolled back",
			scope, tok, context.Cause(ctx))
	}
	if err := tx.Commit(); err != nil {
		return true, commitFailed(scope, tok, err)
	}
	return true, nil
}

// commitFailed describes err, an error of Commit. The database aborting
// the transaction (Retryable: a serialization failure, a deadlock) is a
// certain rollback. Nothing else is: a context error may come from
// database/sql refusing to send COMMIT, or from a driver (pgx) giving up on
// its reply after the database committed, and a broken connection may
// break before or after the commit.
func commitFailed(scope string, tok int64, err error) error {
	if Retryable(err) {
		return fmt.Errorf("fencesql: commit scope %q token %d: %w; the transaction was rolled back", scope, tok, err)
	}
	return fmt.Errorf("%w: scope %q token %d; the writes and the token are both committed or both not: %w",
		ErrCommitUnknown, scope, tok, err)
}

// rolledBack adds to err, an error that made attempt roll its transaction
// back, that ctx had ended, when it had: drivers report a cancelled
// statement in their own words, often without wrapping ctx's error. The
// caller's error stays matchable with errors.Is and errors.As.
func rolledBack(ctx context.Context, scope string, tok int64, err error) error {
	if ctx.Err() == nil {
		return err
	}
	return fmt.Errorf("fencesql: scope %q token %d: %w; the transaction was rolled back: %w",
		scope, tok, context.Cause(ctx), err)
}

// Highest returns the highest token accepted for scope, 0 if none. It reads
// the last committed value without locking.
func (g *Guard) Highest(ctx context.Context, scope string) (uint64, error) {
	if err := fence.ValidateScope(scope); err != nil {
		return 0, err
	}
	var h int64
	err := g.db.QueryRowContext(ctx, g.highestSQL, scope).Scan(&h)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("fencesql: read scope %q: %w", scope, err)
	}
	return tokenFromDB(h)
}

// refusal reports whether err is the check's decision (stale, duplicate,
// gap) rather than a failure to decide.
func refusal(err error) bool {
	return errors.Is(err, fence.ErrStaleToken) || errors.Is(err, fence.ErrDuplicate) || errors.Is(err, fence.ErrSequenceGap)
}

func (g *Guard) observe(ctx context.Context, d fence.Decision) {
	if g.cfg.Observer == nil {
		return
	}
	d.Owner = fence.OwnerFromContext(ctx)
	d.Sequence = fence.SequenceFromContext(ctx)
	g.cfg.Observer.Observe(ctx, d)
}

// observeRefusal reports err, a refusal of the check, as fence.Rejected
// says (stale tokens and duplicates).
func (g *Guard) observeRefusal(ctx context.Context, scope string, presented, highest uint64, err error) {
	var stale *fence.StaleTokenError
	if errors.As(err, &stale) {
		highest = stale.Highest
	}
	if d, report, _ := fence.Rejected(fence.Decision{Scope: scope, Presented: presented, Highest: highest}, err); report {
		g.observe(ctx, d)
	}
}
