package history

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// KindPublish is a message a worker published to the run's queue, stamped
// with its lease (scope Key, Token, Sequence; Object is the message ID).
// Outcome OK: the broker confirmed it; Fail: the broker refused it (code
// CodeNacked); Unknown: no confirmation was read, and the worker resends
// the message with the same stamp and ID.
const KindPublish Kind = "publish"

// CodeNacked: the broker refused a published message (a negative publisher
// confirmation); it was not enqueued.
const CodeNacked = "nacked"

// Publishes went to the main queue (ViaDirect) or through the delay queue
// (ViaDelayed), which holds them for a fixed time before the main queue.
const (
	ViaDirect  = "direct"
	ViaDelayed = "delayed"
)

// Decision outcomes of the queue consumer, the names of fencemsg.Outcome.
const (
	DecisionApplied   = "applied"
	DecisionStale     = "stale"
	DecisionDuplicate = "duplicate"
	DecisionRefused   = "refused"
	DecisionRedeliver = "redeliver"
)

// Delivery is one decision of the queue consumer about one delivery: what
// fencemsg decided for the message, recorded after the decision was final
// (after the commit) and before the delivery was settled with the broker.
// A consumer killed between the two leaves the message to be delivered
// again, and a second Delivery of it.
type Delivery struct {
	// Consumer is the consumer's incarnation (restarts after kills) and N
	// numbers its decisions from 1.
	Consumer int   `json:"c"`
	N        int64 `json:"n"`
	// At is when the decision was final (Unix ns).
	At        int64  `json:"at"`
	MessageID string `json:"id"`
	Scope     string `json:"scope"`
	Token     uint64 `json:"token"`
	Sequence  uint64 `json:"sequence,omitempty"`
	// Redelivered is the broker's flag: the message was delivered before
	// (to a consumer that was killed, or nacked it).
	Redelivered bool   `json:"redelivered,omitempty"`
	Outcome     string `json:"outcome"`
	// Highest, for a stale message, is the highest token the guard had
	// accepted for the scope: the reason for the verdict.
	Highest uint64 `json:"highest,omitempty"`
	Err     string `json:"err,omitempty"`
}

// QueuedMessage is a message still in a queue of the run when it was
// drained at the end.
type QueuedMessage struct {
	Queue     string `json:"queue"`
	MessageID string `json:"id"`
	Scope     string `json:"scope"`
	Token     uint64 `json:"token"`
	Sequence  uint64 `json:"sequence,omitempty"`
}

// DeliveryRecorder appends Deliveries to a file, one write(2) each, so
// that a consumer killed with SIGKILL loses at most the record it was
// writing.
type DeliveryRecorder struct {
	mu       sync.Mutex
	f        *os.File
	consumer int
	n        int64
}

// NewDeliveryRecorder appends to path the decisions of consumer
// incarnation consumer.
func NewDeliveryRecorder(path string, consumer int) (*DeliveryRecorder, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &DeliveryRecorder{f: f, consumer: consumer}, nil
}

// Record stamps d with the incarnation, the next number and the time, and
// appends it.
func (r *DeliveryRecorder) Record(d Delivery) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n++
	d.Consumer, d.N, d.At = r.consumer, r.n, time.Now().UnixNano()
	b, err := json.Marshal(d)
	if err != nil {
		return err
	}
	_, err = r.f.Write(append(b, '\n'))
	return err
}

// Close closes the file.
func (r *DeliveryRecorder) Close() error { return r.f.Close() }

// ReadDeliveries reads a consumer's decisions, in the order they were
// made (incarnations run one after another). A missing file is no
// decision at all; a torn last line (a kill in the middle of a write) is
// skipped.
func ReadDeliveries(path string) ([]Delivery, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read deliveries: %w", err)
	}
	defer f.Close()
	var out []Delivery
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for line := 1; sc.Scan(); line++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var d Delivery
		if err := json.Unmarshal(sc.Bytes(), &d); err != nil {
			if !sc.Scan() {
				break
			}
			return nil, fmt.Errorf("read deliveries %s line %d: %w", filepath.Base(path), line, err)
		}
		out = append(out, d)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read deliveries %s: %w", filepath.Base(path), err)
	}
	return out, nil
}
