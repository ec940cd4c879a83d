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

type quotedNames struct{ table, id, token string }

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
	read := "SELECT " + q.token + " FROM " + q.table + " WHERE " + q.id + " = " + cfg.Dialect.placeholder(1)
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
func (r *RowFence) Update(ctx context.Context, q Querier, id any, token uint64, set ...Assignment) error {
	tok, err := tokenParam(token)
	if err != nil {
		return err
	}
	query, args, err := r.updateSQL(id, tok, set)
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
		var h int64
		err = q.QueryRowContext(ctx, r.readSQL, id).Scan(&h)
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
		if highest == token && r.cfg.Dialect == MySQL {
			return nil // matched but unchanged; see above
		}
	}
	return fmt.Errorf("fencesql: update %s: row changed concurrently on every attempt", scope())
}

func (r *RowFence) updateSQL(id any, tok int64, set []Assignment) (string, []any, error) {
	d := r.cfg.Dialect
	var b strings.Builder
	args := make([]any, 0, len(set)+3)
	seen := make(map[string]bool, len(set))
	b.WriteString("UPDATE " + r.names.table + " SET ")
	for _, a := range set {
		c, err := d.quoteColumn(a.Column)
		if err != nil {
			return "", nil, err
		}
		if a.Column == r.cfg.TokenColumn {
			return "", nil, fmt.Errorf("fencesql: %q is the token column; Update sets it", a.Column)
		}
		if seen[a.Column] {
			return "", nil, fmt.Errorf("fencesql: column %q assigned twice", a.Column)
		}
		seen[a.Column] = true
		args = append(args, a.Value)
		b.WriteString(c + " = " + d.placeholder(len(args)) + ", ")
	}
	args = append(args, tok)
	tokenArg := d.placeholder(len(args))
	args = append(args, id)
	// "token_column >= 0": a negative token was not written by a guard
	// (ErrCorruptToken); the row is not matched, and the read that follows
	// reports it.
	b.WriteString(r.names.token + " = " + tokenArg +
		" WHERE " + r.names.id + " = " + d.placeholder(len(args)) +
		" AND " + r.names.token + " >= 0 AND " + r.names.token + " <= ")
	if d == Postgres {
		b.WriteString(tokenArg) // $n can be used twice
	} else {
		args = append(args, tok)
		b.WriteString("?")
	}
	return b.String(), args, nil
}
