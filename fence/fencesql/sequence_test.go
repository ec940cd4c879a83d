package fencesql_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencesql"
	"github.com/fencedio/fenced/internal/seqstress"
)

type seqStep struct {
	token, seq uint64
	want       error
}

// seqScenarios are the cases of the guard spec's sequence rule (section 7).
var seqScenarios = []struct {
	name   string
	strict bool
	steps  []seqStep
}{
	{"no sequence", false, []seqStep{{5, 0, nil}, {5, 0, nil}, {4, 0, fence.ErrStaleToken}, {6, 0, nil}}},
	{"in order", false, []seqStep{{5, 1, nil}, {5, 2, nil}, {5, 7, nil}}},
	{"duplicate", false, []seqStep{{5, 1, nil}, {5, 2, nil}, {5, 2, fence.ErrDuplicate}, {5, 1, fence.ErrDuplicate}, {5, 3, nil}}},
	{"new epoch", false, []seqStep{{5, 9, nil}, {6, 1, nil}, {6, 1, fence.ErrDuplicate}, {5, 10, fence.ErrStaleToken}}},
	{"new epoch without sequence forgets the last", false, []seqStep{{5, 9, nil}, {6, 0, nil}, {6, 1, nil}}},
	{"same epoch without sequence keeps the last", false, []seqStep{{5, 9, nil}, {5, 0, nil}, {5, 9, fence.ErrDuplicate}}},
	{"first write of a scope", false, []seqStep{{5, 3, nil}, {5, 3, fence.ErrDuplicate}}},
	{"gap refused when strict", true, []seqStep{{5, 4, nil}, {5, 6, fence.ErrSequenceGap}, {5, 5, nil}, {5, 5, fence.ErrDuplicate}, {5, 6, nil}, {6, 3, nil}}},
}

func TestSequences(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		db, _ := openDB(t, b)
		for _, sc := range seqScenarios {
			t.Run(sc.name, func(t *testing.T) {
				var mu sync.Mutex
				var dups, accepted int
				obs := fence.ObserverFunc(func(_ context.Context, d fence.Decision) {
					mu.Lock()
					defer mu.Unlock()
					if d.Duplicate {
						dups++
					}
					if d.Accepted {
						accepted++
					}
				})
				g := newGuard(t, db, b.dialect, fencesql.Config{StrictSequences: sc.strict, Observer: obs})
				w := newWritesTable(t, db, b.dialect)
				wantApplied, wantDups := 0, 0
				for i, st := range sc.steps {
					ctx := fence.WithSequence(context.Background(), st.seq)
					err := g.Do(ctx, "s", st.token, func(ctx context.Context, tx *sql.Tx) error {
						return w.insert(ctx, tx, "s", st.token)
					})
					if st.want == nil && err != nil || st.want != nil && !errors.Is(err, st.want) {
						t.Fatalf("step %d (token %d seq %d): %v, want %v", i, st.token, st.seq, err, st.want)
					}
					if st.want == nil {
						wantApplied++
					}
					if st.want == fence.ErrDuplicate {
						wantDups++
					}
				}
				if n := len(w.all(t, db)); n != wantApplied {
					t.Errorf("%d writes committed, want %d", n, wantApplied)
				}
				if accepted != wantApplied || dups != wantDups {
					t.Errorf("observer: %d accepted, %d duplicates; want %d, %d", accepted, dups, wantApplied, wantDups)
				}
			})
		}
	})
}

// oldDDL is the scope table as guards without sequences created it.
func oldDDL(d fencesql.Dialect, table string) string {
	switch d {
	case fencesql.Postgres:
		return `CREATE TABLE "` + table + `" (scope varchar(512) PRIMARY KEY, highest_token bigint NOT NULL CHECK (highest_token >= 0))`
	case fencesql.MySQL:
		return "CREATE TABLE `" + table + "` (scope VARBINARY(512) NOT NULL PRIMARY KEY, highest_token BIGINT NOT NULL) ENGINE=InnoDB"
	}
	return `CREATE TABLE "` + table + `" (scope TEXT NOT NULL PRIMARY KEY, highest_token BIGINT NOT NULL) WITHOUT ROWID`
}

// A table created before sequences: unsequenced writes work before the
// migration, Migrate (run concurrently) adds the columns and keeps every
// highest token, and a guard without sequences raising a token afterwards
// (an old guard's UPDATE) ends the epoch's sequences.
func TestMigrateOldTable(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		db, _ := openDB(t, b)
		ctx := context.Background()
		table := uniqueName("fence_scopes")
		if _, err := db.ExecContext(ctx, oldDDL(b.dialect, table)); err != nil {
			t.Fatal(err)
		}
		dropLater(t, db, b.dialect, table)
		g, err := fencesql.New(db, fencesql.Config{Dialect: b.dialect, Table: table})
		if err != nil {
			t.Fatal(err)
		}
		nop := func(context.Context, *sql.Tx) error { return nil }
		if err := g.Do(ctx, "s", 5, nop); err != nil {
			t.Fatalf("unsequenced write on the old table: %v", err)
		}
		if err := g.Do(fence.WithSequence(ctx, 1), "s", 5, nop); err == nil {
			t.Fatal("sequenced write on the old table succeeded before Migrate")
		}
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- g.Migrate(ctx)
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("concurrent Migrate: %v", err)
			}
		}
		if h := mustHighest(t, g, "s"); h != 5 {
			t.Fatalf("highest after migrating = %d, want 5", h)
		}
		if err := g.Do(ctx, "s", 4, nop); !errors.Is(err, fence.ErrStaleToken) {
			t.Fatalf("token 4 after migrating: %v, want stale", err)
		}
		seq := func(q uint64) context.Context { return fence.WithSequence(ctx, q) }
		if err := g.Do(seq(7), "s", 5, nop); err != nil {
			t.Fatal(err)
		}
		if err := g.Do(seq(7), "s", 5, nop); !errors.Is(err, fence.ErrDuplicate) {
			t.Fatalf("repeated sequence: %v, want duplicate", err)
		}
		// An old guard raises the token with its own statement.
		q := `UPDATE "` + table + `" SET highest_token = 6 WHERE scope = 's'`
		if b.dialect == fencesql.MySQL {
			q = "UPDATE `" + table + "` SET highest_token = 6 WHERE scope = 's'"
		}
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
		if err := g.Do(seq(1), "s", 6, nop); err != nil {
			t.Fatalf("sequence 1 in the epoch an old guard opened: %v", err)
		}
		if err := g.Do(seq(1), "s", 6, nop); !errors.Is(err, fence.ErrDuplicate) {
			t.Fatalf("repeated sequence: %v, want duplicate", err)
		}
		// Migrating again changes nothing.
		if err := g.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		if err := g.Do(seq(1), "s", 6, nop); !errors.Is(err, fence.ErrDuplicate) {
			t.Fatalf("after a second Migrate: %v, want duplicate", err)
		}
	})
}

// Check in the caller's transaction reads the sequence from its context.
func TestCheckSequence(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		db, _ := openDB(t, b)
		g := newGuard(t, db, b.dialect, fencesql.Config{})
		ctx := fence.WithSequence(context.Background(), 3)
		for i, want := range []error{nil, fence.ErrDuplicate} {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			err = g.Check(ctx, tx, "s", 2)
			if want == nil && err != nil || want != nil && !errors.Is(err, want) {
				t.Fatalf("Check %d: %v, want %v", i, err, want)
			}
			if err == nil {
				err = tx.Commit()
			} else {
				err = tx.Rollback()
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	})
}

// RowFence with a sequence column: per-row sequences, as the scope table
// keeps them per scope.
func TestRowFenceSequences(t *testing.T) {
	for _, b := range rowBackends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			db, _ := openDB(t, b)
			for _, sc := range seqScenarios {
				t.Run(sc.name, func(t *testing.T) {
					ctx := context.Background()
					plain := newItemsTable(t, db, b.dialect)
					table := plain.Config().Table
					stmt, err := fencesql.AddTokenColumnSQL(b.dialect, table, "fence_sequence")
					if err != nil {
						t.Fatal(err)
					}
					if _, err := db.ExecContext(ctx, stmt); err != nil {
						t.Fatal(err)
					}
					rf, err := fencesql.NewRowFence(fencesql.RowConfig{Dialect: b.dialect, Table: table,
						SequenceColumn: "fence_sequence", StrictSequences: sc.strict})
					if err != nil {
						t.Fatal(err)
					}
					applied := int64(0)
					for i, st := range sc.steps {
						err := rf.Update(fence.WithSequence(ctx, st.seq), db, 1, st.token, fencesql.Set("qty", applied+1))
						if st.want == nil && err != nil || st.want != nil && !errors.Is(err, st.want) {
							t.Fatalf("step %d (token %d seq %d): %v, want %v", i, st.token, st.seq, err, st.want)
						}
						if err == nil {
							applied++
						}
						var dup *fence.DuplicateError
						if errors.As(err, &dup) && dup.Scope != table+"/1" {
							t.Fatalf("duplicate scope %q", dup.Scope)
						}
					}
					if it := readItem(t, db, b.dialect, table); it.qty != applied {
						t.Fatalf("qty %d, want %d updates applied", it.qty, applied)
					}
				})
			}
		})
	}
}

func TestRowFenceSequenceColumnConfig(t *testing.T) {
	for _, col := range []string{"id", "fence_token", "bad name"} {
		if _, err := fencesql.NewRowFence(fencesql.RowConfig{Dialect: fencesql.Postgres, Table: "t", SequenceColumn: col}); !errors.Is(err, fencesql.ErrInvalidIdentifier) {
			t.Errorf("SequenceColumn %q: %v", col, err)
		}
	}
}

// The guard stress with sequences on every database: writers retry, with
// the same sequence, writes whose first attempt ran under a cut deadline
// and writes whose connection the proxy reset (PostgreSQL, MySQL); the
// writes table shows each (token, sequence) committed at most once and
// every acknowledged one exactly once.
func TestSequenceStress(t *testing.T) {
	duration := 3 * time.Second
	if os.Getenv("FENCED_LONG") == "1" {
		duration = 30 * time.Second
	}
	forEach(t, func(t *testing.T, b backend) {
		direct, dsn := openDB(t, b)
		db := direct
		var fault func(ctx context.Context) int
		if b.dialect != fencesql.SQLite {
			pdsn, p := viaProxy(t, b, dsn)
			var err error
			if db, err = sql.Open(b.driver, pdsn); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			fault = func(ctx context.Context) int {
				n := 0
				tick := time.NewTicker(100 * time.Millisecond)
				defer tick.Stop()
				for {
					select {
					case <-ctx.Done():
						return n
					case <-tick.C:
						p.Reset()
						n++
					}
				}
			}
		}
		g := newGuard(t, direct, b.dialect, fencesql.Config{})
		g, err := fencesql.New(db, fencesql.Config{Dialect: b.dialect, Table: g.Table(), Retries: 3})
		if err != nil {
			t.Fatal(err)
		}
		table := uniqueName("fence_seqs")
		if _, err := direct.Exec("CREATE TABLE " + quoteName(b.dialect, table) + " (token BIGINT NOT NULL, seq BIGINT NOT NULL)"); err != nil {
			t.Fatal(err)
		}
		dropLater(t, direct, b.dialect, table)
		insert := "INSERT INTO " + quoteName(b.dialect, table) + " (token, seq) VALUES (" + ph(b.dialect, 1) + ", " + ph(b.dialect, 2) + ")"
		write := func(ctx context.Context, token uint64) error {
			err := g.Do(ctx, "s", token, func(ctx context.Context, tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, insert, int64(token), int64(fence.SequenceFromContext(ctx)))
				return err
			})
			if err != nil && !errors.Is(err, fence.ErrStaleToken) && !errors.Is(err, fence.ErrDuplicate) {
				// A broken connection, a deadline: with a sequence, sending
				// the write again cannot apply it twice.
				return fmt.Errorf("%w: %w", fence.ErrUnknownOutcome, err)
			}
			return err
		}
		applied := func() map[seqstress.Key]int {
			rows, err := direct.Query("SELECT token, seq FROM " + quoteName(b.dialect, table))
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			m := map[seqstress.Key]int{}
			for rows.Next() {
				var tok, seq int64
				if err := rows.Scan(&tok, &seq); err != nil {
					t.Fatal(err)
				}
				m[seqstress.Key{Token: uint64(tok), Seq: uint64(seq)}]++
			}
			return m
		}
		res := seqstress.Run(t, seqstress.Config{Writers: 4, Duration: duration, CutShare: 0.2, Cut: 2 * time.Millisecond,
			Timeout: 5 * time.Second, Attempts: 20, Reacquire: 20 * time.Millisecond, Fault: fault}, write, applied)
		t.Log(res)
		if res.Cut == 0 || fault != nil && res.Faults == 0 {
			t.Errorf("the stress exercised nothing: %v", res)
		}
	})
}

// Migrate while a guard that knows no sequences holds a scope row locked in
// an open transaction (an old guard mid-write): the ALTER waits for that
// transaction, both succeed, and the old guard's write stands.
func TestMigrateWhileOldGuardWrites(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		if b.dialect == fencesql.SQLite {
			t.Skip("SQLite serializes the two writers outright (busy timeout)")
		}
		db, _ := openDB(t, b)
		ctx := context.Background()
		table := uniqueName("fence_scopes")
		if _, err := db.ExecContext(ctx, oldDDL(b.dialect, table)); err != nil {
			t.Fatal(err)
		}
		dropLater(t, db, b.dialect, table)
		g, err := fencesql.New(db, fencesql.Config{Dialect: b.dialect, Table: table})
		if err != nil {
			t.Fatal(err)
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := g.Check(ctx, tx, "s", 4); err != nil { // the old guard's statements: no sequence
			t.Fatal(err)
		}
		migrated := make(chan error, 1)
		go func() { migrated <- g.Migrate(ctx) }()
		select {
		case err := <-migrated:
			t.Fatalf("Migrate returned (%v) while a transaction held the table", err)
		case <-time.After(200 * time.Millisecond):
		}
		if err := tx.Commit(); err != nil {
			t.Fatalf("the old guard's commit: %v", err)
		}
		if err := <-migrated; err != nil {
			t.Fatalf("Migrate: %v", err)
		}
		if h := mustHighest(t, g, "s"); h != 4 {
			t.Fatalf("highest %d, want 4", h)
		}
		if err := g.Do(fence.WithSequence(ctx, 1), "s", 4, func(context.Context, *sql.Tx) error { return nil }); err != nil {
			t.Fatalf("sequenced write after migrating: %v", err)
		}
	})
}
