package queue

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // PostgreSQL driver "pgx"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencemsg"
	"github.com/fencedio/fenced/fence/fencemsg/fenceamqp"
	"github.com/fencedio/fenced/fence/fencesql"
	"github.com/fencedio/fenced/internal/failpoint"
	"github.com/fencedio/fenced/internal/torture/history"
)

// ConsumerSpec is what the consumer process is told by the harness.
type ConsumerSpec struct {
	URL   string `json:"url"`
	Queue string `json:"queue"`
	// PostgresDSN, ScopeTable (the guard's) and MessageTable (the
	// effects': one row per applied message, MessageTableSQL).
	PostgresDSN  string `json:"postgresDsn"`
	ScopeTable   string `json:"scopeTable"`
	MessageTable string `json:"messageTable"`
	// History is the file of decisions (history.Delivery), shared by the
	// incarnations, which run one after another.
	History     string `json:"history"`
	Incarnation int    `json:"incarnation,omitempty"`
	// AckDelayMax bounds a random wait between a final decision and the
	// ack, as a consumer that does more work after its commit has: the
	// window in which a kill leaves a committed message unacked.
	AckDelayMax time.Duration `json:"ackDelayMax,omitempty"`
	// NoFencing applies every message without the guard (negative
	// control).
	NoFencing bool   `json:"noFencing,omitempty"`
	Seed      uint64 `json:"seed"`
}

// Event is a line the consumer prints on its standard output: the
// harness aims some kills right after an applied message was decided
// (Outcome "applied"), before its ack.
type Event struct {
	Type    string `json:"e"` // "decided"
	Outcome string `json:"o"`
}

// EventDecided: a decision was recorded and the delivery is about to be
// settled.
const EventDecided = "decided"

// MessageTableSQL creates the table of applied messages.
func MessageTableSQL(table string) string {
	return `CREATE TABLE ` + quoteIdent(table) + ` (
		id       bigserial PRIMARY KEY,
		scope    text NOT NULL,
		token    bigint NOT NULL,
		seq      bigint NOT NULL,
		message  text NOT NULL,
		consumer integer NOT NULL,
		at       bigint NOT NULL
	)`
}

// RowsSQL reads the table of applied messages in ID order.
func RowsSQL(table string) string {
	return `SELECT id, scope, token, seq, message, consumer, at FROM ` + quoteIdent(table) + ` ORDER BY id`
}

func quoteIdent(name string) string { return `"` + strings.ReplaceAll(name, `"`, `""`) + `"` }

type consumer struct {
	spec   ConsumerSpec
	db     *sql.DB
	fenced *fencemsg.Consumer
	rec    *history.DeliveryRecorder
	events *json.Encoder
	rng    *rand.Rand
}

// RunConsumer consumes the queue until ctx ends: one delivery at a time,
// each decided by fencemsg with a fencesql guard whose transaction inserts
// the message's row, recorded, then settled as the guard spec's section 8
// says. When ctx ends it settles the delivery in hand and returns; what it
// has not settled goes back to the queue.
func RunConsumer(ctx context.Context, spec ConsumerSpec, events io.Writer) error {
	if err := failpoint.Check(); err != nil {
		return fmt.Errorf("consumer: %w", err)
	}
	k := &consumer{spec: spec, events: json.NewEncoder(events),
		rng: rand.New(rand.NewPCG(spec.Seed, uint64(spec.Incarnation)))}
	db, err := sql.Open("pgx", spec.PostgresDSN)
	if err != nil {
		return fmt.Errorf("consumer: %w", err)
	}
	defer db.Close()
	db.SetMaxOpenConns(2)
	k.db = db
	g, err := fencesql.New(db, fencesql.Config{Dialect: fencesql.Postgres, Table: spec.ScopeTable})
	if err != nil {
		return fmt.Errorf("consumer: %w", err)
	}
	if k.fenced, err = fencemsg.New(fencemsg.Config{Guard: g.TxGuard()}); err != nil {
		return fmt.Errorf("consumer: %w", err)
	}
	if k.rec, err = history.NewDeliveryRecorder(spec.History, spec.Incarnation); err != nil {
		return fmt.Errorf("consumer: %w", err)
	}
	defer k.rec.Close()
	conn, err := amqp.Dial(spec.URL)
	if err != nil {
		return fmt.Errorf("consumer: %w", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err == nil {
		err = ch.Qos(1, 0, false)
	}
	var deliveries <-chan amqp.Delivery
	if err == nil {
		deliveries, err = ch.Consume(spec.Queue, "", false, false, false, false, nil)
	}
	if err != nil {
		return fmt.Errorf("consumer: %w", err)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case d, ok := <-deliveries:
			if !ok {
				return errors.New("consumer: the broker closed the channel")
			}
			if err := k.handle(d); err != nil {
				return err
			}
		}
	}
}

// handle decides, records and settles one delivery.
func (k *consumer) handle(d amqp.Delivery) error {
	s, stampErr := fencemsg.ReadStamp(fenceamqp.Table(d.Headers))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	o, err := k.decide(ctx, d, s, stampErr)
	rec := history.Delivery{MessageID: d.MessageId, Redelivered: d.Redelivered, Outcome: o.String()}
	if stampErr == nil {
		rec.Scope, rec.Token, rec.Sequence = s.Scope, s.Token, s.Sequence
	}
	if st := (*fence.StaleTokenError)(nil); errors.As(err, &st) {
		rec.Highest = st.Highest
	}
	if err != nil {
		rec.Err = err.Error()
	}
	if err := k.rec.Record(rec); err != nil {
		return fmt.Errorf("consumer: record: %w", err)
	}
	_ = k.events.Encode(Event{Type: EventDecided, Outcome: rec.Outcome})
	if k.spec.AckDelayMax > 0 {
		time.Sleep(time.Duration(k.rng.Int64N(int64(k.spec.AckDelayMax) + 1)))
	}
	if err := fenceamqp.Settle(d, o); err != nil {
		return fmt.Errorf("consumer: message %s: %w", d.MessageId, err)
	}
	return nil
}

// decide applies the message through the guard: its effect is the row,
// inserted in the guard's transaction.
func (k *consumer) decide(ctx context.Context, d amqp.Delivery, s fencemsg.Stamp, stampErr error) (fencemsg.Outcome, error) {
	insert := func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO `+quoteIdent(k.spec.MessageTable)+` (scope, token, seq, message, consumer, at) VALUES ($1, $2, $3, $4, $5, $6)`,
			s.Scope, int64(s.Token), int64(s.Sequence), d.MessageId, k.spec.Incarnation, time.Now().UnixNano())
		return err
	}
	if k.spec.NoFencing {
		if stampErr != nil {
			return fencemsg.Refused, stampErr
		}
		if err := ownTx(ctx, k.db, insert); err != nil {
			return fencemsg.Redeliver, err
		}
		return fencemsg.Applied, nil
	}
	o, err := fenceamqp.Decide(ctx, k.fenced, d.Headers, func(ctx context.Context) error {
		tx, ok := fencesql.TxFromContext(ctx)
		if !ok {
			return errors.New("consumer: no transaction in the guard's context")
		}
		return insert(ctx, tx)
	})
	if o == fencemsg.Stale && failpoint.Enabled(failpoint.ConsumerAppliesStale) {
		// The mutant: the effect of a stale message made anyway, and the
		// message acked as applied.
		if err := ownTx(ctx, k.db, insert); err != nil {
			return fencemsg.Redeliver, err
		}
		return fencemsg.Applied, nil
	}
	return o, err
}

// ownTx runs fn in a transaction of its own, outside the guard.
func ownTx(ctx context.Context, db *sql.DB, fn func(context.Context, *sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it only reports sql.ErrTxDone
	if err := fn(ctx, tx); err != nil {
		return err
	}
	return tx.Commit()
}
