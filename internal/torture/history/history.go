package history

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"
)

// Kind is what an operation did.
type Kind string

const (
	KindAcquire Kind = "acquire"
	KindRenew   Kind = "renew"
	KindRelease Kind = "release"
	KindGet     Kind = "get"
	KindPut     Kind = "put"   // a PUT to the reference store (or the user's resource)
	KindSQL     Kind = "sql"   // a fenced transaction in PostgreSQL
	KindRedis   Kind = "redis" // a fenceredis-guarded script in Redis
)

// Outcome is what the caller knows about an operation's effect.
type Outcome string

const (
	// OK: the operation took effect and the answer was received.
	OK Outcome = "ok"
	// Fail: the operation certainly took no effect (refused, stale, held,
	// or the connection was refused before anything was sent).
	Fail Outcome = "fail"
	// Unknown: the request may or may not have taken effect (timeout,
	// connection broken after sending, node crashed while applying).
	Unknown Outcome = "unknown"
)

// ViaSession marks a lease call carried by a Session stream.
const ViaSession = "session"

// Failure codes in Op.Code.
const (
	CodeHeld        = "held"
	CodeNotFound    = "not_found"
	CodeStale       = "stale"
	CodeRefused     = "refused"     // connection refused: nothing was sent
	CodeUnavailable = "unavailable" // node not ready: nothing was applied
	CodeTimeout     = "timeout"
	CodeTransport   = "transport"
	// CodeAnswerLost: the worker threw the answer away unread, as if the
	// connection had broken after the resource acted (a fault the worker
	// injects, so that writes are resent): the outcome is unknown.
	CodeAnswerLost = "answer_lost"
	// CodeDuplicate, with outcome OK: the resource refused the write as a
	// copy of one already applied under its (token, sequence).
	CodeDuplicate = "duplicate"
)

// Op is one operation in a worker's history. Workers write each operation
// twice, as JSON lines: once before sending it (Return 0), once with its
// result, so that an operation whose worker died in flight is still known
// to have been invoked.
//
// Timestamps are wall-clock Unix nanoseconds. All processes of a run read
// the same machine's clock, which is what makes the real-time order of
// operations from different processes meaningful.
type Op struct {
	Worker int    `json:"w"`
	Seq    int64  `json:"n"` // per worker, from 1
	Kind   Kind   `json:"kind"`
	Key    string `json:"key"`
	// Owner is the owner name sent with an acquisition, unique per attempt;
	// for renewals and releases, the owner name of the lease they concern.
	Owner   string `json:"owner,omitempty"`
	LeaseID string `json:"leaseId,omitempty"`
	TTLMs   int64  `json:"ttlMs,omitempty"`
	WaitMs  int64  `json:"waitMs,omitempty"`
	// Token: for writes the token presented; for acquisitions, renewals and
	// reads of a held key the token returned.
	Token uint64 `json:"token,omitempty"`
	// Object names a write: the store object, or the row's object column.
	Object string `json:"object,omitempty"`
	// Via is "direct" or "proxy" for store writes, and "session" for lease
	// calls carried by a Session stream (unary calls leave it empty).
	Via string `json:"via,omitempty"`
	// Deadline, for writes, is the writer's local deadline of its lease
	// when the write began, as wall-clock Unix nanoseconds (0: not
	// recorded). check.ClientDeadline holds it against the history.
	Deadline int64 `json:"deadline,omitempty"`
	// Sequence, for writes, is the sequence sent with the token (0: none).
	Sequence uint64 `json:"sequence,omitempty"`
	// ResendOf, for a write resent because the outcome of the earlier
	// attempt was unknown, is that first attempt's Seq; a resend carries
	// its token, sequence, object and value.
	ResendOf int64 `json:"resendOf,omitempty"`

	Call    int64   `json:"call"`
	Return  int64   `json:"ret,omitempty"`
	Outcome Outcome `json:"outcome,omitempty"`
	Code    string  `json:"code,omitempty"`
	// Holder and HolderToken describe the lease a refused acquisition ran
	// into, or the current lease a read returned.
	Holder      string `json:"holder,omitempty"`
	HolderToken uint64 `json:"holderToken,omitempty"`
	HasLease    bool   `json:"hasLease,omitempty"`
	LastToken   uint64 `json:"lastToken,omitempty"`
	Err         string `json:"err,omitempty"`
}

// Finished reports whether the operation's result was recorded.
func (o *Op) Finished() bool { return o.Return != 0 }

func (o *Op) String() string {
	s := fmt.Sprintf("w%d#%d %s %q", o.Worker, o.Seq, o.Kind, o.Key)
	if o.Owner != "" {
		s += " owner=" + o.Owner
	}
	if o.Token != 0 {
		s += fmt.Sprintf(" token=%d", o.Token)
	}
	if o.Object != "" {
		s += " object=" + o.Object
	}
	if !o.Finished() {
		return s + " -> (no result)"
	}
	s += " -> " + string(o.Outcome)
	if o.Code != "" {
		s += "/" + o.Code
	}
	return s
}

// ObjectValue is the value a write stores; checkers recompute it.
func ObjectValue(op *Op) []byte {
	return fmt.Appendf(nil, "%s|%d|w%d|%s", op.Key, op.Token, op.Worker, op.Object)
}

// Recorder appends operations to a history file. Each record is one
// write(2), so records survive a SIGKILL of the worker.
type Recorder struct {
	mu     sync.Mutex
	w      io.Writer
	worker int
	seq    int64
	err    error
}

// NewRecorder numbers operations from after+1.
func NewRecorder(w io.Writer, worker int, after int64) *Recorder {
	return &Recorder{w: w, worker: worker, seq: after}
}

// Begin stamps op with the next sequence number and the call time and
// records the invocation.
func (r *Recorder) Begin(op *Op) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq++
	op.Worker, op.Seq = r.worker, r.seq
	op.Call = time.Now().UnixNano()
	r.writeLocked(op)
}

// End stamps the return time and records the result.
func (r *Recorder) End(op *Op, outcome Outcome, code string, err error) {
	op.Return = time.Now().UnixNano()
	op.Outcome, op.Code = outcome, code
	if err != nil {
		op.Err = err.Error()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.writeLocked(op)
}

func (r *Recorder) writeLocked(op *Op) {
	b, err := json.Marshal(op)
	if err != nil {
		r.err = errors.Join(r.err, err)
		return
	}
	if _, err := r.w.Write(append(b, '\n')); err != nil {
		r.err = errors.Join(r.err, err)
	}
}

func (r *Recorder) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// History is the merged history of a run.
type History struct {
	Ops []*Op
	// End is the latest timestamp in the history; operations without a
	// result are treated as still pending at End.
	End int64
}

// ReadHistory reads history files (JSON lines written by workers) and
// merges them. For each operation the last record wins, so an invocation
// followed by its result yields the result.
func ReadHistory(paths ...string) (*History, error) {
	type id struct {
		w int
		n int64
	}
	byID := map[id]*Op{}
	for _, p := range paths {
		if err := readHistoryFile(p, func(op *Op) { byID[id{op.Worker, op.Seq}] = op }); err != nil {
			return nil, err
		}
	}
	h := &History{Ops: make([]*Op, 0, len(byID))}
	for _, op := range byID {
		h.Ops = append(h.Ops, op)
	}
	h.sort()
	return h, nil
}

// NewHistory builds a history from operations (for tests and tools).
func NewHistory(ops []*Op) *History {
	h := &History{Ops: ops}
	h.sort()
	return h
}

func (h *History) sort() {
	sort.Slice(h.Ops, func(i, j int) bool {
		a, b := h.Ops[i], h.Ops[j]
		if a.Call != b.Call {
			return a.Call < b.Call
		}
		if a.Worker != b.Worker {
			return a.Worker < b.Worker
		}
		return a.Seq < b.Seq
	})
	h.End = 0
	for _, op := range h.Ops {
		h.End = max(h.End, op.Call, op.Return)
	}
}

func readHistoryFile(path string, fn func(*Op)) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("read history: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	line := 0
	for sc.Scan() {
		line++
		if len(sc.Bytes()) == 0 {
			continue
		}
		op := new(Op)
		if err := json.Unmarshal(sc.Bytes(), op); err != nil {
			// A worker killed in the middle of a write leaves a torn last
			// line; anything else is corruption.
			if !sc.Scan() {
				break
			}
			return fmt.Errorf("read history %s line %d: %w", filepath.Base(path), line, err)
		}
		fn(op)
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read history %s: %w", filepath.Base(path), err)
	}
	return nil
}

// DelayedWrite is a request that went through the delaying proxy.
type DelayedWrite struct {
	Object string        `json:"object"`
	Scope  string        `json:"scope"`
	Token  uint64        `json:"token"`
	Hold   time.Duration `json:"hold"`
	// Received and Delivered are Unix nanoseconds.
	Received  int64 `json:"received"`
	Delivered int64 `json:"delivered"`
	// Status is the store's answer, 0 when delivery failed (Err says why).
	Status int    `json:"status"`
	Err    string `json:"err,omitempty"`
}
