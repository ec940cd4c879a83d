package fencesql_test

import (
	"context"
	"database/sql"
	"errors"
	"math"
	"testing"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencesql"
	"github.com/fencedio/fenced/internal/testenv"
)

// rowBackends adds MySQL with clientFoundRows=true, under which UPDATE
// reports matched rather than changed rows.
func rowBackends() []backend {
	bs := backends()
	bs = append(bs, backend{name: "mysql-foundrows", dialect: fencesql.MySQL, driver: "mysql", dsn: func(t testing.TB) string {
		return testenv.MySQLDSN(t) + "&clientFoundRows=true"
	}})
	return bs
}

func newItemsTable(t *testing.T, db *sql.DB, d fencesql.Dialect) *fencesql.RowFence {
	t.Helper()
	ctx := context.Background()
	name := uniqueName("fence_items")
	if _, err := db.ExecContext(ctx, "CREATE TABLE "+quoteName(d, name)+" (id BIGINT PRIMARY KEY, name VARCHAR(100) NOT NULL, qty BIGINT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	dropLater(t, db, d, name)
	rf, err := fencesql.NewRowFence(fencesql.RowConfig{Dialect: d, Table: name})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, rf.AddColumnSQL()); err != nil {
		t.Fatalf("%s: %v", rf.AddColumnSQL(), err)
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO "+quoteName(d, name)+" (id, name, qty) VALUES (1, 'new', 0)"); err != nil {
		t.Fatal(err)
	}
	return rf
}

func quoteName(d fencesql.Dialect, name string) string {
	if d == fencesql.MySQL {
		return "`" + name + "`"
	}
	return `"` + name + `"`
}

type item struct {
	name  string
	qty   int64
	token uint64
}

func readItem(t *testing.T, db *sql.DB, d fencesql.Dialect, table string) item {
	t.Helper()
	var (
		it  item
		tok int64
	)
	err := db.QueryRowContext(context.Background(), "SELECT name, qty, fence_token FROM "+quoteName(d, table)+" WHERE id = 1").Scan(&it.name, &it.qty, &tok)
	if err != nil {
		t.Fatal(err)
	}
	it.token = uint64(tok)
	return it
}

func TestRowFenceUpdate(t *testing.T) {
	for _, b := range rowBackends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			db, _ := openDB(t, b)
			ctx := t.Context()
			var rejections []fence.Decision
			rf := newItemsTable(t, db, b.dialect)
			table := rf.Config().Table
			// A second fence on the same table with an observer.
			rf, err := fencesql.NewRowFence(fencesql.RowConfig{Dialect: b.dialect, Table: table,
				Observer: fence.ObserverFunc(func(_ context.Context, d fence.Decision) { rejections = append(rejections, d) })})
			if err != nil {
				t.Fatal(err)
			}

			steps := []struct {
				name    string
				id      int64
				token   uint64
				set     []fencesql.Assignment
				wantErr error
				highest uint64 // of a stale error
				after   item   // row 1 afterwards
			}{
				{"first write", 1, 5, []fencesql.Assignment{fencesql.Set("name", "a"), fencesql.Set("qty", 1)}, nil, 0, item{"a", 1, 5}},
				{"same token again", 1, 5, []fencesql.Assignment{fencesql.Set("name", "b")}, nil, 0, item{"b", 1, 5}},
				{"higher token", 1, 7, []fencesql.Assignment{fencesql.Set("qty", 2)}, nil, 0, item{"b", 2, 7}},
				{"stale token", 1, 6, []fencesql.Assignment{fencesql.Set("name", "stale")}, fence.ErrStaleToken, 7, item{"b", 2, 7}},
				{"unchanged values, same token", 1, 7, []fencesql.Assignment{fencesql.Set("name", "b"), fencesql.Set("qty", 2)}, nil, 0, item{"b", 2, 7}},
				{"token only", 1, 8, nil, nil, 0, item{"b", 2, 8}},
				{"missing row", 99, 100, []fencesql.Assignment{fencesql.Set("name", "x")}, fencesql.ErrRowNotFound, 0, item{"b", 2, 8}},
				{"no token", 1, 0, []fencesql.Assignment{fencesql.Set("name", "x")}, fence.ErrNoToken, 0, item{"b", 2, 8}},
				{"token above MaxInt64", 1, math.MaxInt64 + 1, []fencesql.Assignment{fencesql.Set("name", "x")}, fencesql.ErrTokenOutOfRange, 0, item{"b", 2, 8}},
				{"token MaxUint64", 1, math.MaxUint64, []fencesql.Assignment{fencesql.Set("name", "x")}, fencesql.ErrTokenOutOfRange, 0, item{"b", 2, 8}},
				{"bad column", 1, 9, []fencesql.Assignment{fencesql.Set("name = 'x', qty", 1)}, fencesql.ErrInvalidIdentifier, 0, item{"b", 2, 8}},
			}
			for _, s := range steps {
				err := rf.Update(ctx, db, s.id, s.token, s.set...)
				if s.wantErr == nil && err != nil || !errors.Is(err, s.wantErr) {
					t.Fatalf("%s: Update = %v, want %v", s.name, err, s.wantErr)
				}
				if errors.Is(s.wantErr, fence.ErrStaleToken) {
					var st *fence.StaleTokenError
					if !errors.As(err, &st) || st.Highest != s.highest || st.Presented != s.token || st.Scope != table+"/1" {
						t.Errorf("%s: %+v, want highest %d", s.name, err, s.highest)
					}
				}
				if got := readItem(t, db, b.dialect, table); got != s.after {
					t.Errorf("%s: row %+v, want %+v", s.name, got, s.after)
				}
			}
			if len(rejections) != 1 || rejections[0] != (fence.Decision{Scope: table + "/1", Presented: 6, Highest: 7}) {
				t.Errorf("observer saw %+v, want one rejection of 6 by 7", rejections)
			}

			// In a transaction that rolls back, the update vanishes with it.
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := rf.Update(ctx, tx, 1, 20, fencesql.Set("name", "rolled back")); err != nil {
				t.Fatal(err)
			}
			if err := tx.Rollback(); err != nil {
				t.Fatal(err)
			}
			if got := readItem(t, db, b.dialect, table); got != (item{"b", 2, 8}) {
				t.Errorf("after rollback: %+v", got)
			}
			if err := rf.Update(ctx, db, 1, 9, fencesql.Set("name", "c")); err != nil {
				t.Errorf("token 9 after a rolled back 20: %v", err)
			}
		})
	}
}

func TestRowFenceConfig(t *testing.T) {
	cases := []struct {
		cfg  fencesql.RowConfig
		want error
	}{
		{fencesql.RowConfig{Dialect: fencesql.Postgres, Table: "orders"}, nil},
		{fencesql.RowConfig{Dialect: fencesql.MySQL, Table: "shop.orders", IDColumn: "order_id", TokenColumn: "tok"}, nil},
		{fencesql.RowConfig{Dialect: fencesql.SQLite}, fencesql.ErrInvalidIdentifier},
		{fencesql.RowConfig{Dialect: fencesql.SQLite, Table: "o; DROP TABLE x"}, fencesql.ErrInvalidIdentifier},
		{fencesql.RowConfig{Dialect: fencesql.SQLite, Table: "o", IDColumn: "id`"}, fencesql.ErrInvalidIdentifier},
		{fencesql.RowConfig{Dialect: fencesql.SQLite, Table: "o", TokenColumn: "id"}, fencesql.ErrInvalidIdentifier},
	}
	for _, c := range cases {
		_, err := fencesql.NewRowFence(c.cfg)
		if c.want == nil && err != nil || !errors.Is(err, c.want) {
			t.Errorf("NewRowFence(%+v) = %v, want %v", c.cfg, err, c.want)
		}
	}
	if _, err := fencesql.NewRowFence(fencesql.RowConfig{Table: "o"}); err == nil {
		t.Error("NewRowFence without dialect succeeded")
	}

	rf, err := fencesql.NewRowFence(fencesql.RowConfig{Dialect: fencesql.SQLite, Table: "o"})
	if err != nil {
		t.Fatal(err)
	}
	for _, set := range [][]fencesql.Assignment{
		{fencesql.Set("fence_token", 1)},
		{fencesql.Set("name", 1), fencesql.Set("name", 2)},
	} {
		// Refused before any statement: a nil Querier would panic otherwise.
		if err := rf.Update(context.Background(), nil, 1, 1, set...); err == nil {
			t.Errorf("Update with %v succeeded", set)
		}
	}
}
