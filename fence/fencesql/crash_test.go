package fencesql_test

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencesql"
)

// The crash test re-executes the test binary as a client that dies in the
// middle of a fenced transaction. TestMain turns the binary into that client
// when crashChildEnv is set.
const crashChildEnv = "FENCESQL_CRASH_CHILD"

func TestMain(m *testing.M) {
	if spec := os.Getenv(crashChildEnv); spec != "" {
		os.Exit(crashChild(spec))
	}
	os.Exit(m.Run())
}

// crashSpec is what the parent tells the child, as one environment value.
type crashSpec struct {
	Dialect                 fencesql.Dialect
	Driver, DSN             string
	ScopeTable, WritesTable string
	Scope                   string
	Token                   uint64
}

func (s crashSpec) encode() string {
	return strings.Join([]string{strconv.Itoa(int(s.Dialect)), s.Driver, s.DSN, s.ScopeTable, s.WritesTable, s.Scope, strconv.FormatUint(s.Token, 10)}, "\n")
}

func decodeCrashSpec(v string) (crashSpec, error) {
	f := strings.Split(v, "\n")
	if len(f) != 7 {
		return crashSpec{}, fmt.Errorf("bad spec with %d fields", len(f))
	}
	d, err := strconv.Atoi(f[0])
	if err != nil {
		return crashSpec{}, err
	}
	tok, err := strconv.ParseUint(f[6], 10, 64)
	if err != nil {
		return crashSpec{}, err
	}
	return crashSpec{fencesql.Dialect(d), f[1], f[2], f[3], f[4], f[5], tok}, nil
}

// crashChild checks a token and writes inside a transaction, says "ready"
// and then waits to be killed. It never commits.
func crashChild(v string) int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "crash child:", err)
		return 2
	}
	spec, err := decodeCrashSpec(v)
	if err != nil {
		return fail(err)
	}
	ctx := context.Background()
	db, err := sql.Open(spec.Driver, spec.DSN)
	if err != nil {
		return fail(err)
	}
	g, err := fencesql.New(db, fencesql.Config{Dialect: spec.Dialect, Table: spec.ScopeTable})
	if err != nil {
		return fail(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fail(err)
	}
	if err := g.Check(ctx, tx, spec.Scope, spec.Token); err != nil {
		return fail(err)
	}
	w := writesTable{name: spec.WritesTable, dialect: spec.Dialect}
	if err := w.insert(ctx, tx, spec.Scope, spec.Token); err != nil {
		return fail(err)
	}
	fmt.Println("ready")
	// The parent kills us with SIGKILL. Standard input reaches EOF only if
	// the parent is gone first; leave without committing in that case too.
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 3
}

// TestClientCrashMidTransaction kills (SIGKILL) a client process that has
// checked a high token and written inside an open transaction. The database
// must discard both, and a token between the old highest and the crashed one
// must still be accepted.
func TestClientCrashMidTransaction(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		db, dsn := openDB(t, b)
		g := newGuard(t, db, b.dialect, fencesql.Config{})
		w := newWritesTable(t, db, b.dialect)
		const scope = "crash/1"
		mustDo(t, g, w, scope, 10)

		ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
		defer cancel()
		spec := crashSpec{b.dialect, b.driver, dsn, g.Table(), w.name, scope, 100}
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), crashChildEnv+"="+spec.encode())
		var stderr strings.Builder
		cmd.Stderr = &stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		defer stdin.Close()
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err != nil || line != "ready\n" {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("child did not get ready: %q, %v; stderr: %s", line, err, stderr.String())
		}
		// While the client lives, its uncommitted token is invisible and its
		// row lock makes other checks of the scope wait.
		if h := mustHighest(t, g, scope); h != 10 {
			t.Errorf("highest %d while the crashed transaction is open, want 10", h)
		}
		assertScopeLocked(t, b, dsn, g.Table(), scope)
		if err := cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		err = cmd.Wait()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ProcessState.String() != "signal: killed" {
			t.Fatalf("child ended with %v, want killed; stderr: %s", err, stderr.String())
		}
		assertUnchangedAfterAbort(t, db, g, w, scope)
	})
}

// assertScopeLocked checks that a Check of scope cannot proceed now, using
// each database's way to give up waiting for a lock instead of a timer.
func assertScopeLocked(t *testing.T, b backend, dsn, table, scope string) {
	t.Helper()
	ctx := t.Context()
	if b.dialect == fencesql.SQLite {
		dsn, _, _ = strings.Cut(dsn, "?") // no busy timeout: fail at once
	}
	db, err := sql.Open(b.driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if b.dialect == fencesql.MySQL {
		if _, err := db.ExecContext(ctx, "SET SESSION innodb_lock_wait_timeout = 1"); err != nil {
			t.Fatal(err)
		}
	}
	g, err := fencesql.New(db, fencesql.Config{Dialect: b.dialect, Table: table})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if b.dialect == fencesql.Postgres {
		if _, err := tx.ExecContext(ctx, "SET LOCAL lock_timeout = '100ms'"); err != nil {
			t.Fatal(err)
		}
	}
	err = g.Check(ctx, tx, scope, 50)
	var (
		pgErr *pgconn.PgError
		myErr *mysql.MySQLError
	)
	switch {
	case errors.Is(err, fence.ErrStaleToken) || err == nil:
		t.Errorf("Check while another transaction holds the scope: %v, want a lock wait error", err)
	case b.dialect == fencesql.Postgres && !(errors.As(err, &pgErr) && pgErr.Code == "55P03"),
		b.dialect == fencesql.MySQL && !(errors.As(err, &myErr) && myErr.Number == 1205),
		b.dialect == fencesql.SQLite && !fencesql.Retryable(err):
		t.Errorf("Check while another transaction holds the scope: %v, want a lock wait error", err)
	}
}
