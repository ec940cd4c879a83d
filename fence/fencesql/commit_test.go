package fencesql_test

import (
	"context"
	"database/sql"
	"errors"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fencedio/fenced/fence/fencesql"
	"github.com/fencedio/fenced/internal/faultproxy"
)

// viaProxy returns dsn with its host:port replaced by a proxy's, and the
// proxy, which forwards to the database.
func viaProxy(t *testing.T, b backend, dsn string) (string, *faultproxy.Proxy) {
	t.Helper()
	var target string
	replace := func(addr string) string { return addr }
	switch b.dialect {
	case fencesql.Postgres:
		u, err := url.Parse(dsn)
		if err != nil {
			t.Fatal(err)
		}
		target = u.Host
		replace = func(addr string) string { u.Host = addr; return u.String() }
	case fencesql.MySQL:
		re := regexp.MustCompile(`tcp\(([^)]*)\)`)
		m := re.FindStringSubmatch(dsn)
		if m == nil {
			t.Fatalf("no tcp(host:port) in the MySQL DSN %q", dsn)
		}
		target = m[1]
		replace = func(addr string) string { return strings.Replace(dsn, m[0], "tcp("+addr+")", 1) }
	default:
		t.Fatalf("%s has no network to proxy", b.name)
	}
	p, err := faultproxy.Listen("127.0.0.1:0", target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return replace(p.Addr()), p
}

// TestCommitCutByDeadline sends a transaction's COMMIT to the database at
// once and holds its reply back past the caller's deadline. The database
// committed; the driver (pgx) gives up on the reply when the deadline
// passes. Do must not call that a rollback: the outcome is unknown to it
// (ErrCommitUnknown). MySQL's driver does not watch the context during
// COMMIT and waits for the reply: Do then succeeds. Either way, a write
// that committed is never reported as rolled back.
func TestCommitCutByDeadline(t *testing.T) {
	for _, b := range backends()[:2] {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			db, dsn := openDB(t, b)
			g := newGuard(t, db, b.dialect, fencesql.Config{})
			w := newWritesTable(t, db, b.dialect)
			proxied, proxy := viaProxy(t, b, dsn)
			pdb, err := sql.Open(b.driver, proxied)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { pdb.Close() })
			pg, err := fencesql.New(pdb, fencesql.Config{Dialect: b.dialect, Table: g.Table()})
			if err != nil {
				t.Fatal(err)
			}

			const scope, token = "commit/cut", 5
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			defer cancel()
			deadline, _ := ctx.Deadline()
			err = pg.Do(ctx, scope, token, func(ctx context.Context, tx *sql.Tx) error {
				if err := w.insert(ctx, tx, scope, token); err != nil {
					return err
				}
				// What follows is the COMMIT: its reply arrives after the
				// deadline.
				proxy.SetReplyDelay(time.Until(deadline) + 300*time.Millisecond)
				return nil
			})
			proxy.SetReplyDelay(0)
			committed := w.count(t, db, scope, token) == 1
			if h := mustHighest(t, g, scope); committed != (h == token) {
				t.Fatalf("the write committed: %v, yet the highest token is %d", committed, h)
			}
			t.Logf("committed %v, Do = %v", committed, err)
			if err != nil && strings.Contains(err.Error(), "rolled back") {
				t.Errorf("Do = %v; it says rolled back, and the write committed: %v", err, committed)
			}
			switch {
			case committed && err != nil && !errors.Is(err, fencesql.ErrCommitUnknown):
				t.Errorf("Do = %v for a committed write; want nil or ErrCommitUnknown", err)
			case !committed && err == nil:
				t.Error("Do succeeded and nothing committed")
			}
			if b.dialect == fencesql.Postgres && !errors.Is(err, fencesql.ErrCommitUnknown) {
				t.Errorf("PostgreSQL: Do = %v; want ErrCommitUnknown (pgx gives up on COMMIT at the deadline)", err)
			}
		})
	}
}
