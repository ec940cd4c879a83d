// Package msgtest is the consumer side shared by the message-fencing
// process tests (fence/fencemsg/fenceamqp, fence/fencemsg/fencejetstream):
// a fencemsg.Consumer whose guard is fencesql's PostgreSQL guard, whose
// side effect is a row per message in the same transaction, and a record
// of every outcome, so a test can check that no message was applied twice
// and none was lost.
package msgtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // the pgx database/sql driver

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencemsg"
	"github.com/fencedio/fenced/fence/fencesql"
	"github.com/fencedio/fenced/internal/testenv"
)

// Name returns prefix followed by random hex, for tables, queues and
// streams of one test.
func Name(prefix string) string {
	b := make([]byte, 6)
	rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// Sink is a consumer whose effect is a row per applied message in
// PostgreSQL, committed with the scope's highest token.
type Sink struct {
	DB       *sql.DB
	Guard    *fencesql.Guard
	Consumer *fencemsg.Consumer
	scopes   string // table names
	effects  string

	mu       sync.Mutex
	outcomes map[string][]fencemsg.Outcome // message ID -> outcomes in order
	stale    []fence.Decision              // stale decisions the guard observed
}

// NewSink makes the scope and effect tables (dropped when t ends) and the
// consumer. The guard has strict sequences, as fencemsg recommends for a
// broker that can redeliver out of order. The guard also tells observers
// (a fence/fencereport reporter, say) of every decision.
func NewSink(t testing.TB, observers ...fence.Observer) *Sink {
	t.Helper()
	scopes, effects := Name("fencemsg_scopes_"), Name("fencemsg_effects_")
	s := AttachSink(t, scopes, effects, nil, observers...)
	ctx := context.Background()
	if err := s.Guard.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DB.ExecContext(ctx, fmt.Sprintf(`CREATE TABLE %q (id text NOT NULL, scope text NOT NULL, token bigint NOT NULL)`, effects)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.DB.ExecContext(context.Background(), fmt.Sprintf(`DROP TABLE IF EXISTS %q, %q`, effects, scopes))
	})
	return s
}

// Tables returns the names of the sink's scope and effect tables, for
// AttachSink in another process.
func (s *Sink) Tables() (scopes, effects string) { return s.scopes, s.effects }

// AttachSink is the consumer of a sink made by NewSink, in another
// process: the same tables, which it neither makes nor drops. onStale, if
// set, is told of each stale rejection instead of the sink's own record.
func AttachSink(t testing.TB, scopes, effects string, onStale func(fence.Decision), observers ...fence.Observer) *Sink {
	t.Helper()
	db, err := sql.Open("pgx", testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	s := &Sink{DB: db, scopes: scopes, effects: effects, outcomes: map[string][]fencemsg.Outcome{}}
	if onStale == nil {
		onStale = s.AddStale
	}
	s.Guard, err = fencesql.New(db, fencesql.Config{
		Dialect:         fencesql.Postgres,
		Table:           scopes,
		StrictSequences: true,
		Observer: append(fence.Observers{fence.ObserverFunc(func(_ context.Context, d fence.Decision) {
			if !d.Accepted && !d.Duplicate {
				onStale(d)
			}
		})}, observers...),
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Consumer, err = fencemsg.New(fencemsg.Config{Guard: s.Guard.TxGuard()})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// AddStale records a stale rejection that a guard observed.
func (s *Sink) AddStale(d fence.Decision) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stale = append(s.stale, d)
}

// Apply returns the side effect of message id: a row in the effect table,
// written in the guard's transaction.
func (s *Sink) Apply(id string, h fencemsg.Header) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		tx, ok := fencesql.TxFromContext(ctx)
		if !ok {
			return fmt.Errorf("no transaction in the context")
		}
		st, err := fencemsg.ReadStamp(h)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, fmt.Sprintf(`INSERT INTO %q (id, scope, token) VALUES ($1, $2, $3)`, s.effects), id, st.Scope, int64(st.Token))
		return err
	}
}

// Record notes the outcome of one delivery of message id.
func (s *Sink) Record(id string, o fencemsg.Outcome) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.outcomes[id] = append(s.outcomes[id], o)
}

// Applied returns the IDs of the effect rows, sorted, one per row.
func (s *Sink) Applied(t testing.TB) []string {
	t.Helper()
	rows, err := s.DB.QueryContext(context.Background(), fmt.Sprintf(`SELECT id FROM %q ORDER BY id`, s.effects))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return ids
}

// Outcomes returns the outcomes of every delivery of message id.
func (s *Sink) Outcomes(id string) []fencemsg.Outcome {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]fencemsg.Outcome(nil), s.outcomes[id]...)
}

// Stale returns the stale rejections the guard's observer was told of.
func (s *Sink) Stale() []fence.Decision {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]fence.Decision(nil), s.stale...)
}

// Check fails t unless exactly the messages in applied have an effect row,
// one each (none applied twice, none lost), every message in stale was
// last decided Stale, and the observer saw one stale rejection per stale
// delivery, naming staleOwner.
func (s *Sink) Check(t testing.TB, applied, stale []string, staleOwner string) {
	t.Helper()
	want := append([]string(nil), applied...)
	sort.Strings(want)
	if got := s.Applied(t); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("effect rows %v, want exactly one each of %v", got, want)
	}
	var staleDeliveries int
	for _, id := range stale {
		os := s.Outcomes(id)
		if len(os) == 0 || os[len(os)-1] != fencemsg.Stale {
			t.Errorf("message %s: outcomes %v, want the last to be stale", id, os)
		}
		for _, o := range os {
			if o == fencemsg.Stale {
				staleDeliveries++
			}
		}
	}
	rejections := s.Stale()
	if len(rejections) != staleDeliveries {
		t.Errorf("the guard's observer saw %d stale rejections, want %d: %+v", len(rejections), staleDeliveries, rejections)
	}
	for _, d := range rejections {
		if d.Owner != staleOwner || d.Presented >= d.Highest {
			t.Errorf("stale rejection %+v: want owner %q and presented below highest", d, staleOwner)
		}
	}
}
