package fencesql

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/fencedio/fenced/fence"
)

// Dialect selects the SQL spoken to the database. The zero value is invalid,
// so that forgetting to set it fails in New rather than at the first query.
type Dialect int

const (
	// Postgres is PostgreSQL through database/sql, normally with the pgx
	// driver (github.com/jackc/pgx/v5/stdlib, driver name "pgx").
	Postgres Dialect = iota + 1
	// MySQL is MySQL or MariaDB with InnoDB tables, through
	// github.com/go-sql-driver/mysql.
	MySQL
	// SQLite is SQLite through modernc.org/sqlite (driver name "sqlite").
	SQLite
)

// String returns the dialect's name.
func (d Dialect) String() string {
	switch d {
	case Postgres:
		return "postgres"
	case MySQL:
		return "mysql"
	case SQLite:
		return "sqlite"
	}
	return "Dialect(" + strconv.Itoa(int(d)) + ")"
}

func (d Dialect) valid() error {
	switch d {
	case Postgres, MySQL, SQLite:
		return nil
	}
	return fmt.Errorf("fencesql: unknown dialect %d", int(d))
}

// placeholder returns the n-th (1-based) bind parameter marker.
func (d Dialect) placeholder(n int) string {
	if d == Postgres {
		return "$" + strconv.Itoa(n)
	}
	return "?"
}

// DefaultTable is the scope table's name when Config.Table is empty.
const DefaultTable = "fence_scopes"

// DefaultTokenColumn is the row-level token column's name when
// RowConfig.TokenColumn is empty.
const DefaultTokenColumn = "fence_token"

// MaxScopeLen is the longest scope, in bytes: fence.MaxScopeBytes, which the
// scope column (512 bytes or characters) holds exactly. Longer scopes are
// refused before any statement runs, so a lenient MySQL sql_mode never gets
// to truncate one into another scope's row.
const MaxScopeLen = fence.MaxScopeBytes

// ErrInvalidIdentifier is returned for a table or column name that is not a
// plain SQL identifier. Names are spliced into SQL text (they cannot be bind
// parameters), so only [A-Za-z_][A-Za-z0-9_]* of at most 63 bytes is
// accepted, optionally qualified by a schema as "schema.table".
var ErrInvalidIdentifier = errors.New("fencesql: invalid SQL identifier")

// maxIdentLen is PostgreSQL's limit (NAMEDATALEN-1); MySQL allows 64.
const maxIdentLen = 63

func validIdentPart(s string) bool {
	if s == "" || len(s) > maxIdentLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '_', 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case '0' <= c && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// quoteColumn validates and quotes a column name.
func (d Dialect) quoteColumn(name string) (string, error) {
	if !validIdentPart(name) {
		return "", fmt.Errorf("%w: column %q", ErrInvalidIdentifier, name)
	}
	return d.quote(name), nil
}

// quoteTable validates and quotes a table name, optionally schema-qualified.
func (d Dialect) quoteTable(name string) (string, error) {
	parts := strings.Split(name, ".")
	if len(parts) > 2 {
		return "", fmt.Errorf("%w: table %q", ErrInvalidIdentifier, name)
	}
	for i, p := range parts {
		if !validIdentPart(p) {
			return "", fmt.Errorf("%w: table %q", ErrInvalidIdentifier, name)
		}
		parts[i] = d.quote(p)
	}
	return strings.Join(parts, "."), nil
}

// quote quotes an identifier that validIdentPart accepted. Quoting protects
// reserved words ("order", "user"); the character set is already safe.
// Quoted names are case-sensitive in PostgreSQL, which folds unquoted names
// to lower case, so mixed-case names must match how the table was created.
func (d Dialect) quote(s string) string {
	if d == MySQL {
		return "`" + s + "`"
	}
	return `"` + s + `"`
}

// CreateTableSQL returns the CREATE TABLE IF NOT EXISTS statement of the
// scope table for d, for use in a migration tool. An empty table means
// DefaultTable. See the package documentation for why the column types
// differ between dialects.
func CreateTableSQL(d Dialect, table string) (string, error) {
	if err := d.valid(); err != nil {
		return "", err
	}
	if table == "" {
		table = DefaultTable
	}
	t, err := d.quoteTable(table)
	if err != nil {
		return "", err
	}
	switch d {
	case Postgres:
		return "CREATE TABLE IF NOT EXISTS " + t + " (\n" +
			"    scope          varchar(512) PRIMARY KEY,\n" +
			"    highest_token  bigint NOT NULL CHECK (highest_token >= 0),\n" +
			"    sequence_token bigint NOT NULL DEFAULT 0,\n" +
			"    last_sequence  bigint NOT NULL DEFAULT 0\n" +
			")", nil
	case MySQL:
		return "CREATE TABLE IF NOT EXISTS " + t + " (\n" +
			"    scope          VARBINARY(512) NOT NULL PRIMARY KEY,\n" +
			"    highest_token  BIGINT NOT NULL,\n" +
			"    sequence_token BIGINT NOT NULL DEFAULT 0,\n" +
			"    last_sequence  BIGINT NOT NULL DEFAULT 0\n" +
			") ENGINE=InnoDB", nil
	default: // SQLite
		return "CREATE TABLE IF NOT EXISTS " + t + " (\n" +
			"    scope          TEXT NOT NULL PRIMARY KEY,\n" +
			"    highest_token  BIGINT NOT NULL,\n" +
			"    sequence_token BIGINT NOT NULL DEFAULT 0,\n" +
			"    last_sequence  BIGINT NOT NULL DEFAULT 0\n" +
			") WITHOUT ROWID", nil
	}
}

// SequenceColumns are the scope table's columns for sequences (see
// MigrateSequenceSQL), in the order MigrateSequenceSQL adds them.
var SequenceColumns = []string{"sequence_token", "last_sequence"}

// MigrateSequenceSQL returns the statements that add the sequence columns
// to a scope table created without them (before sequences existed), one
// per column of SequenceColumns. Guard.Migrate runs them when needed.
// Guards that know no sequences keep working on the migrated table.
func MigrateSequenceSQL(d Dialect, table string) ([]string, error) {
	if err := d.valid(); err != nil {
		return nil, err
	}
	if table == "" {
		table = DefaultTable
	}
	t, err := d.quoteTable(table)
	if err != nil {
		return nil, err
	}
	var stmts []string
	for _, c := range SequenceColumns {
		stmts = append(stmts, "ALTER TABLE "+t+" ADD COLUMN "+c+" BIGINT NOT NULL DEFAULT 0")
	}
	return stmts, nil
}

// AddTokenColumnSQL returns the ALTER TABLE statement that adds the
// row-level token column (DefaultTokenColumn when column is empty) to a
// user table. The statement is the same for every dialect; rows that exist
// before the migration start at token 0, which every real token passes.
func AddTokenColumnSQL(d Dialect, table, column string) (string, error) {
	if err := d.valid(); err != nil {
		return "", err
	}
	if column == "" {
		column = DefaultTokenColumn
	}
	t, err := d.quoteTable(table)
	if err != nil {
		return "", err
	}
	c, err := d.quoteColumn(column)
	if err != nil {
		return "", err
	}
	return "ALTER TABLE " + t + " ADD COLUMN " + c + " BIGINT NOT NULL DEFAULT 0", nil
}
