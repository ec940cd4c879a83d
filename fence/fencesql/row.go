package fencesql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/fencedio/fenced/fence"
)

// Querier is what RowFence needs to run statements: *sql.DB, *sql.Tx and
// *sql.Conn all satisfy it.
type Querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

var (
	_ Querier = (*sql.DB)(nil)
	_ Querier = (*sql.Tx)(nil)
	_ Querier = (*sql.Conn)(nil)
)

// RowConfig configures a RowFence.
type RowConfig struct {
	// Dialect is the SQL dialect of the database. Required.
	Dialect Dialect
	// Table is the user table whose rows carry a token column, optionally
	// "schema.table". Required.
	Table string
	// IDColumn is the column that identifies a row; it should be the
	// primary key or unique. Default "id".
	IDColumn string
	// TokenColumn holds the highest token that wrote each row. Default
	// DefaultTokenColumn ("fence_token"); see AddTokenColumnSQL.
	TokenColumn string
	// SequenceColumn, if set, holds the last sequence accepted under each
	// row's token (fence.WithSequence; docs/guard-spec.md, section 7): an
	// update whose sequence is at or below it, under the row's token, is a
	// duplicate (fence.ErrDuplicate) and changes nothing. Add it with
	// AddTokenColumnSQL(dialect, table, column), like the token column. An
	// update without a sequence resets it when it raises the row's token.
	// Default "": sequences are ignored.
	SequenceColumn string
	// StrictSequences refuses, with a *fence.SequenceGapError, a sequence
	// other than the row's last plus 1 under the same token.
	StrictSequences bool
	// Observer, if set, is told of every rejection. Acceptances are not
	// reported: when Update runs in the caller's transaction, only the
	// caller knows whether it commits. Default: none.
	Observer fence.Observer
}

// Validate checks the configuration; NewRowFence calls it.
func (c RowConfig) Validate() error {
	_, err := c.withDefaults().quoted()
	return err
}

func (c RowConfig) withDefaults() RowConfig {
	if c.IDColumn == "" {
		c.IDColumn = "id"
	}
	if c.TokenColumn == "" {
		c.TokenColumn = DefaultTokenColumn
	}
	return c
}

type quotedNames struct{ table, id, token, seq string }

func (c RowConfig) quoted() (q quotedNames, err error) {
	if err := c.Dialect.valid(); err != nil {
		return q, err
	}
	if c.Table == "" {
		return q, fmt.Errorf("%w: RowConfig.Table is required", ErrInvalidIdentifier)
	}
	if q.table, err = c.Dialect.quoteTable(c.Table); err != nil {
		return q, err
	}
	if q.id, err = c.Dialect.quoteColumn(c.IDColumn); err != nil {
		return q, err
	}
	if q.token, err = c.Dialect.quoteColumn(c.TokenColumn); err != nil {
		return q, err
	}
	if c.IDColumn == c.TokenColumn {
		return q, fmt.Errorf("%w: id and token column are both %q", ErrInvalidIdentifier, c.IDColumn)
	}
	if c.SequenceColumn != "" {
		if q.seq, err = c.Dialect.quoteColumn(c.SequenceColumn); err != nil {
			return q, err
		}
		if c.SequenceColumn == c.IDColumn || c.SequenceColumn == c.TokenColumn {
			return q, fmt.Errorf("%w: sequence column %q is also the id or token column", ErrInvalidIdentifier, c.SequenceColumn)
		}
	}
	return q, nil
}

// Assignment is one "column = value" of an UPDATE. The column is validated
// and quoted; the value is always a bind parameter.
type Assignment struct {
	Column string
	Value  any
}

// Set returns the assignment column = value.
func Set(column string, value any) Assignment { return Assignment{Column: column, Value: value} }

// RowFence applies the row-level pattern: every row of a user table carries
// the highest token that wrote it, and an update goes through only with a
// token at least as high. It needs no scope table and no transaction (the
// single UPDATE is atomic), but it fences only updates of existing rows; see
// the package documentation. A RowFence is safe for concurrent use.
type RowFence struct {
	cfg     RowConfig
	names   quotedNames
	readSQL string
}

// NewRowFence validates cfg and returns a RowFence.
func NewRowFence(cfg RowConfig) (*RowFence, error) {
	cfg = cfg.withDefaults()
	q, err := cfg.quoted()
	if err != nil {
		return nil, err
	}
	cols := q.token
	if q.seq != "" {
		cols += ", " + q.seq
	}
	read := "SELECT " + cols + " FROM " + q.table + " WHERE " + q.id + " = " + cfg.Dialect.placeholder(1)
	if cfg.Dialect != SQLite {
		// A locking read sees the latest committed row even under
		// REPEATABLE READ, where a plain read would see the transaction's
		// snapshot, and keeps the answer true until the caller's
		// transaction ends.
		read += " FOR UPDATE"
	}
	return &RowFence{cfg: cfg, names: q, readSQL: read}, nil
}

// Config returns the configuration with defaults filled in.
func (r *RowFence) Config() RowConfig { return r.cfg }

// AddColumnSQL returns the statement that adds the token column to the
// table; see AddTokenColumnSQL.
func (r *RowFence) AddColumnSQL() string {
	s, _ := AddTokenColumnSQL(r.cfg.Dialect, r.cfg.Table, r.cfg.TokenColumn) // validated by NewRowFence
	return s
}

// Update runs, through q,
//
//	UPDATE table SET set..., token_column = token
//	WHERE id_column = id AND token_column >= 0 AND token_column <= token
//
// with every value bound as a parameter. If no row matched, it reads the
// row's token to tell why: ErrRowNotFound when there is no row with id, or
// a *fence.StaleTokenError (Scope "table/id", Highest the row's token) when
// the row carries a higher token, or ErrCorruptToken (nothing written) when
// it carries a negative one. A token above math.MaxInt64 returns
// ErrTokenOutOfRange and 0 returns fence.ErrNoToken, before any statement.
//
// Within a transaction (q a *sql.Tx) the updated row stays locked until the
// transaction ends, as with any UPDATE.
//
// MySQL reports by default the rows an UPDATE changed rather than matched,
// so an update that writes the values the row already holds, with the token
// it already carries, affects 0 rows. Update recognizes that case by the
// token it reads back and returns nil; the DSN option clientFoundRows=true
// makes the first answer exact and saves the second statement.
//
// With RowConfig.SequenceColumn and a sequence in ctx (fence.WithSequence),
// the update also needs the sequence above the row's last one when the
// token equals the row's, and records it; otherwise it returns a
// *fence.DuplicateError (or, strict, a *fence.SequenceGapError) and changes
// nothing.
func (r *RowFence) Update(ctx context.Context, q Querier, id any, token uint64, set ...Assignment) error {
	tok, err := tokenParam(token)
	if err != nil {
		return err
	}
	var seq uint64
	if r.names.seq != "" {
		seq = fence.SequenceFromContext(ctx)
		if err := fence.CheckSequence("-", token, seq, 0, 0, false); err != nil {
			return err
		}
	}
	query, args, err := r.updateSQL(id, tok, int64(seq), set)
	if err != nil {
		return err
	}
	scope := func() string { return r.cfg.Table + "/" + fmt.Sprint(id) }
	// A row that did not match can match a moment later if it is created
	// concurrently (or its id changes); a second round settles such races.
	for range 3 {
		res, err := q.ExecContext(ctx, query, args...)
		if err != nil {
			return fmt.Errorf("fencesql: update %s: %w", scope(), err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("fencesql: update %s: %w", scope(), err)
		}
		if n > 0 {
			return nil
		}
		var h, last int64
		dest := []any{&h}
		if r.names.seq != "" {
			dest = append(dest, &last)
		}
		err = q.QueryRowContext(ctx, r.readSQL, id).Scan(dest...)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: %s", ErrRowNotFound, scope())
		}
		if err != nil {
			return fmt.Errorf("fencesql: read %s: %w", scope(), err)
		}
		highest, err := tokenFromDB(h)
		if err != nil {
			return err
		}
		if highest > token {
			stale := &fence.StaleTokenError{Scope: scope(), Presented: token, Highest: highest}
			if r.cfg.Observer != nil {
				r.cfg.Observer.Observe(ctx, fence.Decision{Scope: stale.Scope, Presented: token, Highest: highest, Accepted: false, Owner: fence.OwnerFromContext(ctx)})
			}
			return stale
		}
		if seq != 0 && highest == token {
			err := fence.CheckSequence(scope(), token, seq, highest, uint64(max(last, 0)), r.cfg.StrictSequences)
			if errors.Is(err, fence.ErrDuplicate) && r.cfg.Observer != nil {
				r.cfg.Observer.Observe(ctx, fence.Decision{Scope: scope(), Presented: token, Highest: highest,
					Sequence: seq, Duplicate: true, Owner: fence.OwnerFromContext(ctx)})
			}
			if err != nil {
				return err
			}
		}
		if highest == token && r.cfg.Dialect == MySQL && seq == 0 {
			return nil // matched but unchanged; see above
		}
	}
	return fmt.Errorf("fencesql: update %s: row changed concurrently on every attempt", scope())
}

func (r *RowFence) updateSQL(id any, tok, seq int64, set []Assignment) (string, []any, error) {
	d := r.cfg.Dialect
	var b strings.Builder
	args := make([]any, 0, len(set)+8)
	seen := make(map[string]bool, len(set))
	// bind adds v and returns its placeholder. Every value is bound where it
	// is used (MySQL and SQLite cannot refer to a parameter twice).
	bind := func(v any) string {
		args = append(args, v)
		return d.placeholder(len(args))
	}
	// On PostgreSQL the token is bound once and its $n reused.
	var tokPH string
	bindTok := func() string {
		if d == Postgres && tokPH != "" {
			return tokPH
		}
		tokPH = bind(tok)
		return tokPH
	}
	b.WriteString("UPDATE " + r.names.table + " SET ")
	for _, a := range set {
		c, err := d.quoteColumn(a.Column)
		if err != nil {
			return "", nil, err
		}
		if a.Column == r.cfg.TokenColumn || a.Column == r.cfg.SequenceColumn {
			return "", nil, fmt.Errorf("fencesql: %q is the token or sequence column; Update sets it", a.Column)
		}
		if seen[a.Column] {
			return "", nil, fmt.Errorf("fencesql: column %q assigned twice", a.Column)
		}
		seen[a.Column] = true
		b.WriteString(c + " = " + bind(a.Value) + ", ")
	}
	t, sq := r.names.token, r.names.seq
	// The sequence column comes before the token column: MySQL evaluates
	// assignments left to right, with the new values of earlier ones.
	switch {
	case sq != "" && seq != 0:
		b.WriteString(sq + " = " + bind(seq) + ", ")
	case sq != "":
		b.WriteString(sq + " = CASE WHEN " + t + " < " + bindTok() + " THEN 0 ELSE " + sq + " END, ")
	}
	// "token_column >= 0": a negative token was not written by a guard
	// (ErrCorruptToken); the row is not matched, and the read that follows
	// reports it.
	b.WriteString(t + " = " + bindTok() + " WHERE " + r.names.id + " = " + bind(id) + " AND " + t + " >= 0 AND ")
	if sq == "" || seq == 0 {
		b.WriteString(t + " <= " + bindTok())
		return b.String(), args, nil
	}
	b.WriteString("(" + t + " < " + bindTok() + " OR (" + t + " = " + bindTok() + " AND " + sq)
	if r.cfg.StrictSequences {
		b.WriteString(" = " + bind(seq-1) + "))")
	} else {
		b.WriteString(" < " + bind(seq) + "))")
	}
	return b.String(), args, nil
}
