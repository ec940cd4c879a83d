package worker

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // PostgreSQL driver "pgx"
	"github.com/redis/go-redis/v9"

	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencehttp"
	"github.com/fencedio/fenced/fence/fenceredis"
	"github.com/fencedio/fenced/fence/fencesql"
	"github.com/fencedio/fenced/internal/torture/history"
	"github.com/fencedio/fenced/internal/torture/queue"
)

// Spec is what a worker process is told by the harness.
type Spec struct {
	ID       int    `json:"id"`
	Endpoint string `json:"endpoint"`
	// Endpoints, if set, are a cluster's nodes: the client fails over
	// between them (Endpoint is then ignored).
	Endpoints []string `json:"endpoints,omitempty"`
	Keys      []string `json:"keys"`
	// StoreURL is the base URL of the reference store; ProxyURL the delaying
	// proxy in front of it ("" disables delayed writes).
	StoreURL string `json:"storeUrl"`
	ProxyURL string `json:"proxyUrl,omitempty"`
	// Postgres: DSN and the run's tables ("" disables SQL writes).
	PostgresDSN string `json:"postgresDsn,omitempty"`
	ScopeTable  string `json:"scopeTable,omitempty"`
	WriteTable  string `json:"writeTable,omitempty"`
	// Redis: the address and the prefix of the run's keys ("" disables
	// Redis writes).
	RedisAddr   string `json:"redisAddr,omitempty"`
	RedisPrefix string `json:"redisPrefix,omitempty"`
	// Queue: the broker's URL and the run's queues ("" disables
	// publishing). A worker publishes a message stamped with its lease
	// before each round of writes; QueueDelayShare is the share of leases
	// whose messages all go through DelayQueue.
	QueueURL        string  `json:"queueUrl,omitempty"`
	Queue           string  `json:"queue,omitempty"`
	DelayQueue      string  `json:"delayQueue,omitempty"`
	QueueDelayShare float64 `json:"queueDelayShare,omitempty"`
	// NoFencing writes to PostgreSQL and Redis without the guard (negative
	// control).
	NoFencing bool `json:"noFencing,omitempty"`

	TTL            time.Duration `json:"ttl"`
	Wait           time.Duration `json:"wait"`
	WritesMin      int           `json:"writesMin"`
	WritesMax      int           `json:"writesMax"`
	ThinkMax       time.Duration `json:"thinkMax"`
	GetProbability float64       `json:"getProbability"`
	// FollowerReadShare is the share of reads sent to one of Endpoints
	// picked at random, not to the client's choice.
	FollowerReadShare float64 `json:"followerReadShare,omitempty"`
	// LongHoldShare is the chance that a lease's think times spread its
	// writes over up to 4×TTL, so that it is renewed several times.
	LongHoldShare  float64 `json:"longHoldShare,omitempty"`
	TryProbability float64 `json:"tryProbability"`
	DelayShare     float64 `json:"delayShare"`
	// SequenceShare is the share of direct store writes, SQL writes and
	// Redis writes sent with the lease's next sequence. Such a write whose outcome is
	// unknown is resent, with the same token and sequence, up to
	// maxResends times.
	SequenceShare float64 `json:"sequenceShare,omitempty"`
	// LostAnswerShare is the share of the answers to sequenced writes
	// that the worker throws away unread, as if the connection had broken
	// after the resource acted: their outcome is unknown, and the write is
	// resent.
	LostAnswerShare float64 `json:"lostAnswerShare,omitempty"`
	// Unary makes the worker's client send Acquire, Renew and Release as
	// unary calls instead of over its Session stream.
	Unary bool `json:"unary,omitempty"`
	// AbandonProbability is the chance that a worker drops a lease without
	// releasing it, so that it expires on the server.
	AbandonProbability float64       `json:"abandonProbability"`
	WriteTimeout       time.Duration `json:"writeTimeout"`
	// DelayedWriteTimeout is how long a worker waits for a write sent
	// through the proxy before it gives the lease up.
	DelayedWriteTimeout time.Duration `json:"delayedWriteTimeout"`
	History             string        `json:"history"`
	Seed                uint64        `json:"seed"`
	// Incarnation counts restarts of this worker after a crash. Operation
	// numbers, owner names and object names of each incarnation are
	// distinct.
	Incarnation int `json:"incarnation,omitempty"`
}

// name is the worker's name in owners and object names.
func (s Spec) name() string {
	if s.Incarnation == 0 {
		return fmt.Sprintf("w%d", s.ID)
	}
	return fmt.Sprintf("w%d.%d", s.ID, s.Incarnation)
}

// Event is a line a worker prints on its standard output for the harness,
// which uses them to aim pauses and crashes.
type Event struct {
	Type  string `json:"e"` // acquiring, holding, released, idle, acked
	Key   string `json:"k,omitempty"`
	Token uint64 `json:"t,omitempty"`
	Lease int    `json:"l,omitempty"` // per-worker lease number
	// Kind is the operation an acked event reports.
	Kind history.Kind `json:"o,omitempty"`
}

const (
	EventAcquiring = "acquiring"
	EventHolding   = "holding"
	EventReleased  = "released"
	EventIdle      = "idle"
	// EventAcked: an acquisition, renewal or release was just acknowledged
	// and recorded; the harness aims some crashes right after it.
	EventAcked = "acked"
)

// Run runs one worker loop until ctx ends: acquire a random key
// (waiting in line), make a few fenced writes with its token to the store
// and PostgreSQL with random think time, then release it (or, sometimes,
// abandon it to expire). Every lease operation and write goes to the
// history file in spec.History; events go to events.
//
// Workers deliberately do not consult their lease's local deadline before
// writing: every write behaves like one from a process paused between its
// last check and its write, so the resources' fencing is what is tested. A
// stale rejection ends the lease (client.Lease.MarkLost, invariant I7) and the
// worker goes back to acquiring; it never retries a write under another
// token. A write that carried a sequence and whose outcome is unknown is
// resent with the same token and sequence, which the guard must apply at
// most once.
func Run(ctx context.Context, spec Spec, events io.Writer) error {
	f, err := os.OpenFile(spec.History, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("worker %d: %w", spec.ID, err)
	}
	defer f.Close()
	w := &worker{
		spec:   spec,
		rec:    history.NewRecorder(f, spec.ID, int64(spec.Incarnation)*1_000_000_000),
		rng:    rand.New(rand.NewPCG(spec.Seed, uint64(spec.ID)<<32|uint64(spec.Incarnation))),
		events: json.NewEncoder(events),
		store: &http.Transport{
			DialContext:         (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
			MaxIdleConnsPerHost: 4,
		},
	}
	w.leases = newLeaseRecorder(w.rec, 2*time.Second)
	w.leases.onAck = func(op *history.Op) { w.emit(Event{Type: EventAcked, Key: op.Key, Kind: op.Kind}) }
	w.client, err = client.New(client.Config{
		Endpoint:       spec.Endpoint,
		Endpoints:      spec.Endpoints,
		HTTPClient:     w.leases,
		Owner:          spec.name(),
		TTL:            spec.TTL,
		RequestTimeout: max(spec.TTL/2, 100*time.Millisecond),
		DisableSession: spec.Unary,
	})
	if err != nil {
		return fmt.Errorf("worker %d: %w", spec.ID, err)
	}
	for _, ep := range spec.Endpoints {
		c, err := client.New(client.Config{Endpoint: ep, HTTPClient: w.leases, Owner: spec.name(), TTL: spec.TTL,
			RequestTimeout: max(spec.TTL/2, 100*time.Millisecond), DisableSession: spec.Unary})
		if err != nil {
			return fmt.Errorf("worker %d: %w", spec.ID, err)
		}
		w.direct = append(w.direct, c)
	}
	if spec.PostgresDSN != "" {
		db, err := sql.Open("pgx", spec.PostgresDSN)
		if err != nil {
			return fmt.Errorf("worker %d: %w", spec.ID, err)
		}
		defer db.Close()
		db.SetMaxOpenConns(2)
		w.db = db
		w.guard, err = fencesql.New(db, fencesql.Config{Dialect: fencesql.Postgres, Table: spec.ScopeTable})
		if err != nil {
			return fmt.Errorf("worker %d: %w", spec.ID, err)
		}
	}
	if spec.QueueURL != "" {
		if w.pub, err = queue.NewPublisher(spec.QueueURL); err != nil {
			return fmt.Errorf("worker %d: %w", spec.ID, err)
		}
		defer w.pub.Close()
	}
	if spec.RedisAddr != "" {
		closeRedis, err := w.openRedis()
		if err != nil {
			return fmt.Errorf("worker %d: %w", spec.ID, err)
		}
		defer closeRedis()
	}
	w.run(ctx)
	return w.rec.Err()
}

type worker struct {
	spec   Spec
	rec    *history.Recorder
	rng    *rand.Rand
	leases *leaseRecorder
	client *client.Client
	// direct has a client per node of a cluster, for reads sent to a
	// node on purpose (FollowerReadShare).
	direct []*client.Client
	store  *http.Transport
	db     *sql.DB
	guard  *fencesql.Guard
	rdb    redis.UniversalClient
	rguard *fenceredis.Guard
	pub    *queue.Publisher

	evMu   sync.Mutex
	events *json.Encoder

	attempts int
	held     int
	writes   int64
}

func (w *worker) emit(ev Event) {
	w.evMu.Lock()
	defer w.evMu.Unlock()
	_ = w.events.Encode(ev)
}

func (w *worker) run(ctx context.Context) {
	for ctx.Err() == nil {
		if w.rng.Float64() < w.spec.GetProbability {
			w.get(w.key())
		}
		key := w.key()
		w.attempts++
		owner := fmt.Sprintf("%s-%d", w.spec.name(), w.attempts)
		w.emit(Event{Type: EventAcquiring, Key: key})
		wait := w.spec.Wait
		if w.rng.Float64() < w.spec.TryProbability {
			wait = 0
		}
		actx, cancel := context.WithTimeout(ctx, wait+w.spec.TTL)
		l, err := w.client.Acquire(actx, key, client.WithWait(wait), client.WithTTL(w.spec.TTL), client.WithOwner(owner))
		cancel()
		if err != nil {
			w.emit(Event{Type: EventIdle})
			// Back off a little, less when the key was merely held.
			backoff := w.spec.TTL / 4
			if errors.Is(err, client.ErrHeld) {
				backoff = w.spec.TTL / 20
			}
			w.sleep(ctx, time.Duration(w.rng.Int64N(int64(backoff)+1)))
			continue
		}
		w.held++
		w.emit(Event{Type: EventHolding, Key: key, Token: l.Token(), Lease: w.held})
		w.hold(l)
		w.emit(Event{Type: EventIdle})
	}
}

func (w *worker) key() string { return w.spec.Keys[w.rng.IntN(len(w.spec.Keys))] }

func (w *worker) sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// hold makes the writes of one lease, then releases or abandons it. It
// does not watch ctx: the harness stops workers by SIGTERM and waits for
// the lease in hand to be finished.
func (w *worker) hold(l *client.Lease) {
	n := w.spec.WritesMin
	if d := w.spec.WritesMax - w.spec.WritesMin; d > 0 {
		n += w.rng.IntN(d + 1)
	}
	think := w.spec.ThinkMax
	if w.rng.Float64() < w.spec.LongHoldShare {
		think = max(think, 4*w.spec.TTL/time.Duration(n))
	}
	// A lease's messages all take one way, so that they reach the
	// consumer in the order of their sequences.
	viaDelay := w.pub != nil && w.rng.Float64() < w.spec.QueueDelayShare
	for range n {
		time.Sleep(time.Duration(w.rng.Int64N(int64(think) + 1)))
		if w.pub != nil {
			// First, so that a holder woken from a pause past its TTL
			// publishes before a stale rejection ends its lease.
			w.publish(l, viaDelay)
		}
		delayed := w.spec.ProxyURL != "" && w.rng.Float64() < w.spec.DelayShare
		switch w.put(l, delayed) {
		case writeStale:
			return // the transport called Lost already
		case writeAbandon:
			// A write that timed out may still land: give the lease up so
			// that another holder's writes can overtake it.
			w.release(l)
			return
		}
		if w.guard != nil && w.sql(l) == writeStale {
			return
		}
		if w.rdb != nil && w.redis(l) == writeStale {
			return
		}
	}
	if w.rng.Float64() < w.spec.AbandonProbability {
		l.Orphan() // abandoned: no renewal, no release, so the server expires it
		return
	}
	w.release(l)
}

func (w *worker) release(l *client.Lease) {
	_ = l.Release(context.Background())
	w.emit(Event{Type: EventReleased, Key: l.Key()})
}

func (w *worker) get(key string) {
	ctx, cancel := context.WithTimeout(context.Background(), max(w.spec.TTL, time.Second))
	defer cancel()
	c := w.client
	if len(w.direct) > 0 && w.rng.Float64() < w.spec.FollowerReadShare {
		c = w.direct[w.rng.IntN(len(w.direct))]
	}
	_, _ = c.Get(ctx, key)
}

type writeResult int

const (
	writeOK writeResult = iota
	writeStale
	writeAbandon
	writeFailed
	// writeUnknown: the write may or may not have been applied.
	writeUnknown
)

// objectName names the write uniquely, so that the checkers can tie every
// record at the resource to the worker and token that sent it.
func objectName(key, worker string, seq int64) string {
	return fmt.Sprintf("%s/%s/%d", key, worker, seq)
}

// maxResends bounds the resends of one sequenced write whose outcome
// stays unknown.
const maxResends = 3

// put makes a store write: through the delaying proxy, or direct, then
// with the lease's next sequence for a share of them, and resent while its
// outcome is unknown.
func (w *worker) put(l *client.Lease, delayed bool) writeResult {
	w.writes++
	op := &history.Op{Kind: history.KindPut, Key: l.Key(), Token: l.Token(), Object: objectName(l.Key(), w.spec.name(), w.writes), Via: "direct"}
	if delayed {
		op.Via = "proxy"
		switch res, code := w.putOnce(l, op, w.spec.ProxyURL, w.spec.DelayedWriteTimeout); {
		case res == writeUnknown && (code == history.CodeTimeout || code == history.CodeTransport):
			// A write that timed out may still land: give the lease up so
			// that another holder's writes can overtake it.
			return writeAbandon
		case res == writeUnknown:
			return writeFailed
		default:
			return res
		}
	}
	op.Sequence = w.nextSequence(l)
	return w.resend(op, func(op *history.Op) writeResult {
		res, _ := w.putOnce(l, op, w.spec.StoreURL, w.spec.WriteTimeout)
		return res
	})
}

// resend makes the write op with once, then, if it carries a sequence,
// sends copies of it (same token, sequence, object and value; each its own
// operation, marked ResendOf) while its outcome is unknown, up to
// maxResends times. The guard must apply the write at most once: a copy
// of one applied is refused as a duplicate.
func (w *worker) resend(op *history.Op, once func(*history.Op) writeResult) writeResult {
	res := once(op)
	first := op.Seq
	for n := 0; res == writeUnknown && op.Sequence != 0 && n < maxResends; n++ {
		time.Sleep(time.Duration(10+w.rng.IntN(40)) * time.Millisecond)
		op = &history.Op{Kind: op.Kind, Key: op.Key, Token: op.Token, Object: op.Object, Via: op.Via, Sequence: op.Sequence, ResendOf: first}
		res = once(op)
	}
	if res == writeUnknown {
		return writeFailed
	}
	return res
}

// loseAnswer reports whether the answer to a sequenced write is to be
// thrown away unread (Spec.LostAnswerShare).
func (w *worker) loseAnswer(op *history.Op) bool {
	return op.Sequence != 0 && w.spec.LostAnswerShare > 0 && w.rng.Float64() < w.spec.LostAnswerShare
}

var errAnswerLost = errors.New("answer thrown away unread by the worker (injected fault)")

// putOnce sends op to the store at base and records it; for an unknown
// outcome it also returns the code.
func (w *worker) putOnce(l *client.Lease, op *history.Op, base string, timeout time.Duration) (writeResult, string) {
	op.Deadline = l.Deadline().UnixNano()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if op.Sequence != 0 {
		ctx = fence.WithSequence(ctx, op.Sequence)
	}
	hc := &http.Client{Transport: fencehttp.NewTransport(l, w.store)}
	w.rec.Begin(op)
	req, err := http.NewRequestWithContext(ctx, http.MethodPut,
		strings.TrimRight(base, "/")+"/v1/objects/"+url.PathEscape(op.Object), bytes.NewReader(history.ObjectValue(op)))
	if err != nil {
		w.rec.End(op, history.Fail, "request", err)
		return writeFailed, ""
	}
	resp, err := hc.Do(req)
	if err != nil {
		outcome, code := transportOutcome(err)
		w.rec.End(op, outcome, code, err)
		if outcome == history.Unknown {
			return writeUnknown, code
		}
		return writeFailed, ""
	}
	fenced := fencehttp.ErrorFromResponse(resp)
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	if w.loseAnswer(op) {
		w.rec.End(op, history.Unknown, history.CodeAnswerLost, errAnswerLost)
		return writeUnknown, history.CodeAnswerLost
	}
	switch {
	case errors.Is(fenced, fence.ErrDuplicate):
		// A copy of this very write (same object, token and sequence)
		// was applied, and this one was not.
		w.rec.End(op, history.OK, history.CodeDuplicate, nil)
		return writeOK, ""
	case resp.StatusCode/100 == 2:
		w.rec.End(op, history.OK, "", nil)
		return writeOK, ""
	case resp.StatusCode == http.StatusConflict:
		w.rec.End(op, history.Fail, history.CodeStale, fmt.Errorf("HTTP 409: %s", bytes.TrimSpace(body)))
		return writeStale, ""
	case resp.StatusCode >= 500:
		code := fmt.Sprintf("http_%d", resp.StatusCode)
		w.rec.End(op, history.Unknown, code, fmt.Errorf("%s", bytes.TrimSpace(body)))
		return writeUnknown, code
	}
	w.rec.End(op, history.Fail, fmt.Sprintf("http_%d", resp.StatusCode), fmt.Errorf("%s", bytes.TrimSpace(body)))
	return writeFailed, ""
}

// sql makes a fenced SQL write, with the lease's next sequence for a share
// of them, resent while its outcome is unknown.
func (w *worker) sql(l *client.Lease) writeResult {
	w.writes++
	op := &history.Op{Kind: history.KindSQL, Key: l.Key(), Token: l.Token(), Object: objectName(l.Key(), w.spec.name(), w.writes)}
	if !w.spec.NoFencing {
		op.Sequence = w.nextSequence(l)
	}
	return w.resend(op, func(op *history.Op) writeResult { return w.sqlOnce(l, op) })
}

func (w *worker) sqlOnce(l *client.Lease, op *history.Op) writeResult {
	op.Deadline = l.Deadline().UnixNano()
	ctx, cancel := context.WithTimeout(context.Background(), w.spec.WriteTimeout)
	defer cancel()
	insert := func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO `+QuoteIdent(w.spec.WriteTable)+` (scope, token, worker, object, seq) VALUES ($1, $2, $3, $4, $5)`,
			op.Key, int64(op.Token), w.spec.ID, op.Object, int64(op.Sequence))
		return err
	}
	w.rec.Begin(op)
	var err error
	if w.spec.NoFencing {
		err = unfencedTx(ctx, w.db, insert)
	} else {
		if op.Sequence != 0 {
			ctx = fence.WithSequence(ctx, op.Sequence)
		}
		err = w.guard.Do(ctx, op.Key, op.Token, insert)
	}
	return w.endGuardedWrite(op, l, err)
}

// endGuardedWrite records the outcome of a write through a guard (err is
// the guard's answer) and returns it; an error that is neither stale nor
// a duplicate leaves it unknown, as the write may have been applied before
// the connection broke.
func (w *worker) endGuardedWrite(op *history.Op, l *client.Lease, err error) writeResult {
	if w.loseAnswer(op) {
		w.rec.End(op, history.Unknown, history.CodeAnswerLost, errAnswerLost)
		return writeUnknown
	}
	switch {
	case errors.Is(err, fence.ErrDuplicate):
		w.rec.End(op, history.OK, history.CodeDuplicate, nil)
		return writeOK
	case err == nil:
		w.rec.End(op, history.OK, "", nil)
		return writeOK
	case errors.Is(err, fence.ErrStaleToken):
		w.rec.End(op, history.Fail, history.CodeStale, err)
		l.MarkLost(err)
		return writeStale
	}
	w.rec.End(op, history.Unknown, history.CodeTransport, err)
	return writeUnknown
}

// nextSequence returns the lease's next sequence for a share of the writes
// (Spec.SequenceShare), 0 for the others.
func (w *worker) nextSequence(l *client.Lease) uint64 {
	if w.spec.SequenceShare > 0 && w.rng.Float64() < w.spec.SequenceShare {
		return l.NextSequence()
	}
	return 0
}

func unfencedTx(ctx context.Context, db *sql.DB, fn func(context.Context, *sql.Tx) error) error {
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

// QuoteIdent quotes a PostgreSQL identifier made by the harness (the
// run's tables).
func QuoteIdent(name string) string { return `"` + strings.ReplaceAll(name, `"`, `""`) + `"` }
