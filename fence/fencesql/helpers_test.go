package fencesql_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"testing"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"

	"github.com/fencedio/fenced/fence/fencesql"
	"github.com/fencedio/fenced/internal/testenv"
)

// backend is one database the tests run against.
type backend struct {
	name    string
	dialect fencesql.Dialect
	driver  string
	dsn     func(t testing.TB) string // skips or fails as testenv decides
}

func sqliteDSN(path string) string {
	// A busy timeout lets concurrent writers wait for the write lock
	// instead of failing at once; WAL lets readers proceed meanwhile.
	return "file:" + path + "?_pragma=busy_timeout(20000)&_pragma=journal_mode(WAL)"
}

func backends() []backend {
	return []backend{
		{name: "postgres", dialect: fencesql.Postgres, driver: "pgx", dsn: testenv.PostgresURL},
		{name: "mysql", dialect: fencesql.MySQL, driver: "mysql", dsn: testenv.MySQLDSN},
		{name: "sqlite", dialect: fencesql.SQLite, driver: "sqlite", dsn: func(t testing.TB) string {
			return sqliteDSN(filepath.Join(t.TempDir(), "fence.db"))
		}},
	}
}

// forEach runs f as a parallel subtest per backend.
func forEach(t *testing.T, f func(t *testing.T, b backend)) {
	t.Helper()
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			f(t, b)
		})
	}
}

func openDB(t testing.TB, b backend) (*sql.DB, string) {
	t.Helper()
	dsn := b.dsn(t)
	db, err := sql.Open(b.driver, dsn)
	if err != nil {
		t.Fatalf("open %s: %v", b.name, err)
	}
	t.Cleanup(func() { db.Close() })
	if err := db.PingContext(context.Background()); err != nil {
		t.Fatalf("ping %s: %v", b.name, err)
	}
	return db, dsn
}

func uniqueName(prefix string) string {
	var buf [6]byte
	if _, err := rand.Read(buf[:]); err != nil {
		panic(err)
	}
	return prefix + "_" + hex.EncodeToString(buf[:])
}

func dropLater(t testing.TB, db *sql.DB, d fencesql.Dialect, table string) {
	t.Cleanup(func() {
		q := `DROP TABLE IF EXISTS "` + table + `"`
		if d == fencesql.MySQL {
			q = "DROP TABLE IF EXISTS `" + table + "`"
		}
		if _, err := db.ExecContext(context.Background(), q); err != nil {
			t.Errorf("drop %s: %v", table, err)
		}
	})
}

// newGuard creates a guard on a fresh scope table that is dropped after t.
func newGuard(t testing.TB, db *sql.DB, d fencesql.Dialect, cfg fencesql.Config) *fencesql.Guard {
	t.Helper()
	cfg.Dialect = d
	if cfg.Table == "" {
		cfg.Table = uniqueName("fence_scopes")
	}
	g, err := fencesql.New(db, cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := g.Migrate(context.Background()); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	dropLater(t, db, d, cfg.Table)
	return g
}

// ph returns the n-th bind parameter marker of d.
func ph(d fencesql.Dialect, n int) string {
	if d == fencesql.Postgres {
		return fmt.Sprintf("$%d", n)
	}
	return "?"
}

// writesTable is a user table that records accepted writes; seq is assigned
// by the database at insert time, inside the fenced transaction.
type writesTable struct {
	name    string
	dialect fencesql.Dialect
}

func newWritesTable(t testing.TB, db *sql.DB, d fencesql.Dialect) writesTable {
	t.Helper()
	w := writesTable{name: uniqueName("fence_writes"), dialect: d}
	if err := w.create(context.Background(), db); err != nil {
		t.Fatalf("create %s: %v", w.name, err)
	}
	dropLater(t, db, d, w.name)
	return w
}

func (w writesTable) create(ctx context.Context, db *sql.DB) error {
	var q string
	switch w.dialect {
	case fencesql.Postgres:
		q = `CREATE TABLE "` + w.name + `" (seq bigserial PRIMARY KEY, scope text NOT NULL, token bigint NOT NULL)`
	case fencesql.MySQL:
		q = "CREATE TABLE `" + w.name + "` (seq BIGINT AUTO_INCREMENT PRIMARY KEY, scope VARBINARY(512) NOT NULL, token BIGINT NOT NULL) ENGINE=InnoDB"
	default:
		q = `CREATE TABLE "` + w.name + `" (seq INTEGER PRIMARY KEY AUTOINCREMENT, scope TEXT NOT NULL, token BIGINT NOT NULL)`
	}
	_, err := db.ExecContext(ctx, q)
	return err
}

func (w writesTable) insert(ctx context.Context, tx *sql.Tx, scope string, token uint64) error {
	_, err := tx.ExecContext(ctx, "INSERT INTO "+w.quoted()+" (scope, token) VALUES ("+ph(w.dialect, 1)+", "+ph(w.dialect, 2)+")", scope, int64(token))
	return err
}

func (w writesTable) quoted() string {
	if w.dialect == fencesql.MySQL {
		return "`" + w.name + "`"
	}
	return `"` + w.name + `"`
}

type write struct {
	seq   int64
	scope string
	token uint64
}

// all returns every recorded write in seq order.
func (w writesTable) all(t testing.TB, db *sql.DB) []write {
	t.Helper()
	rows, err := db.QueryContext(context.Background(), "SELECT seq, scope, token FROM "+w.quoted()+" ORDER BY seq")
	if err != nil {
		t.Fatalf("read %s: %v", w.name, err)
	}
	defer rows.Close()
	var out []write
	for rows.Next() {
		var (
			wr    write
			scope []byte // VARBINARY on MySQL
			tok   int64
		)
		if err := rows.Scan(&wr.seq, &scope, &tok); err != nil {
			t.Fatalf("scan %s: %v", w.name, err)
		}
		wr.scope, wr.token = string(scope), uint64(tok)
		out = append(out, wr)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("read %s: %v", w.name, err)
	}
	return out
}

// count returns how many writes exist for scope with token.
func (w writesTable) count(t testing.TB, db *sql.DB, scope string, token uint64) int {
	t.Helper()
	n := 0
	for _, wr := range w.all(t, db) {
		if wr.scope == scope && wr.token == token {
			n++
		}
	}
	return n
}

func mustHighest(t testing.TB, g *fencesql.Guard, scope string) uint64 {
	t.Helper()
	h, err := g.Highest(context.Background(), scope)
	if err != nil {
		t.Fatalf("Highest(%q): %v", scope, err)
	}
	return h
}
