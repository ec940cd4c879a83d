package fencereport

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/fence"
)

// Sender delivers a batch of rejections to fenced; *client.Client
// satisfies it.
type Sender interface {
	ReportRejections(ctx context.Context, rs []client.StaleRejection) (uint64, error)
}

var _ Sender = (*client.Client)(nil)

// Config configures a Reporter.
type Config struct {
	// Resource names the resource whose guard reports, e.g. "ledger-http"
	// or "orders-db": fenced shows and counts rejections by it. Required,
	// at most 128 bytes of printable text.
	Resource string
	// Sender delivers the batches, usually a *client.Client. Required.
	Sender Sender
	// QueueSize bounds the entries waiting to be sent. Default 4096.
	QueueSize int
	// BatchSize is the most entries sent in one call. Default 500, at
	// most 1000 (fenced's limit).
	BatchSize int
	// FlushInterval is how long rejections wait for company before they
	// are sent. Default 1s.
	FlushInterval time.Duration
	// SendTimeout bounds each call to Sender. Default 5s.
	SendTimeout time.Duration
}

const (
	maxBatch   = 1000
	maxBackoff = time.Minute
)

// Validate checks the configuration after defaults are applied.
func (c Config) Validate() error {
	switch {
	case c.Resource == "" || len(c.Resource) > 128 || !fence.ValidOwner(c.Resource):
		return fmt.Errorf("fencereport: Resource %q must be 1 to 128 bytes of printable text", c.Resource)
	case c.Sender == nil:
		return errors.New("fencereport: Sender is required")
	case c.QueueSize < 1:
		return fmt.Errorf("fencereport: QueueSize %d is below 1", c.QueueSize)
	case c.BatchSize < 1 || c.BatchSize > maxBatch:
		return fmt.Errorf("fencereport: BatchSize %d is outside 1..%d", c.BatchSize, maxBatch)
	case c.FlushInterval <= 0 || c.SendTimeout <= 0:
		return errors.New("fencereport: FlushInterval and SendTimeout must be positive")
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.QueueSize == 0 {
		c.QueueSize = 4096
	}
	if c.BatchSize == 0 {
		c.BatchSize = 500
	}
	if c.FlushInterval == 0 {
		c.FlushInterval = time.Second
	}
	if c.SendTimeout == 0 {
		c.SendTimeout = 5 * time.Second
	}
	return c
}

// entryKey identifies identical rejections, which share one entry.
type entryKey struct {
	scope              string
	presented, highest uint64
	owner              string
}

// Reporter is a fence.Observer that reports stale rejections to fenced in
// the background. Safe for concurrent use.
type Reporter struct {
	cfg Config

	mu      sync.Mutex
	pending map[entryKey]uint32 // rejections waiting, by kind
	closed  bool

	full chan struct{} // cap 1: a batch is ready
	stop chan struct{} // closed by Close
	done chan struct{} // closed when run returns

	sent, dropped, duplicates atomic.Uint64
}

var _ fence.Observer = (*Reporter)(nil)

// New starts a Reporter. Close it to send what is queued and stop.
func New(cfg Config) (*Reporter, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &Reporter{cfg: cfg, pending: make(map[entryKey]uint32),
		full: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go r.run()
	return r, nil
}

// Observe queues d if it is a stale rejection. A duplicate (a write
// already applied under its sequence, fence.ErrDuplicate) is not one: it is
// only counted (Duplicates). It never blocks on the network.
func (r *Reporter) Observe(_ context.Context, d fence.Decision) {
	if d.Duplicate {
		r.duplicates.Add(1)
		return
	}
	if d.Accepted || d.Presented >= d.Highest {
		return
	}
	k := entryKey{scope: d.Scope, presented: d.Presented, highest: d.Highest, owner: d.Owner}
	r.mu.Lock()
	n, ok := r.pending[k]
	if r.closed || (!ok && len(r.pending) >= r.cfg.QueueSize) || n == math.MaxUint32 {
		r.mu.Unlock()
		r.dropped.Add(1)
		return
	}
	r.pending[k] = n + 1
	ready := len(r.pending) >= r.cfg.BatchSize
	r.mu.Unlock()
	if ready {
		select {
		case r.full <- struct{}{}:
		default:
		}
	}
}

// Resource returns the name the reporter reports under (Config.Resource).
func (r *Reporter) Resource() string { return r.cfg.Resource }

// Sent returns how many rejections fenced has accepted from r.
func (r *Reporter) Sent() uint64 { return r.sent.Load() }

// Dropped returns how many rejections r did not deliver: the queue was
// full, or fenced did not accept their batch.
func (r *Reporter) Dropped() uint64 { return r.dropped.Load() }

// Duplicates returns how many duplicate writes r observed. They are not
// sent to fenced: the lease behind them was not fenced off.
func (r *Reporter) Duplicates() uint64 { return r.duplicates.Load() }

// Pending returns how many entries wait to be sent (at most QueueSize).
func (r *Reporter) Pending() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.pending)
}

// Close stops the reporter after one last attempt, bounded by ctx, to send
// what is queued; a send already under way is waited for (at most
// SendTimeout). Rejections observed after Close are dropped.
func (r *Reporter) Close(ctx context.Context) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		<-r.done
		return nil
	}
	r.closed = true
	r.mu.Unlock()
	close(r.stop)
	<-r.done
	r.send(ctx)
	return nil
}

func (r *Reporter) run() {
	defer close(r.done)
	wait := r.cfg.FlushInterval
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		// A full queue is sent at once, except while backing off.
		full := r.full
		if wait > r.cfg.FlushInterval {
			full = nil
		}
		select {
		case <-r.stop:
			return
		case <-timer.C:
		case <-full:
		}
		ctx, cancel := context.WithTimeout(context.Background(), r.cfg.SendTimeout)
		failed := r.send(ctx)
		cancel()
		// While fenced does not answer, try less often.
		if failed {
			wait = min(2*wait, maxBackoff)
		} else {
			wait = r.cfg.FlushInterval
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(wait)
	}
}

// send takes everything queued and sends it in batches; a batch that fails
// is dropped. It reports whether any batch failed.
func (r *Reporter) send(ctx context.Context) (failed bool) {
	r.mu.Lock()
	taken := r.pending
	r.pending = make(map[entryKey]uint32, len(taken))
	r.mu.Unlock()
	batch := make([]client.StaleRejection, 0, min(len(taken), r.cfg.BatchSize))
	var count uint64
	flush := func() {
		if len(batch) == 0 {
			return
		}
		if _, err := r.cfg.Sender.ReportRejections(ctx, batch); err != nil {
			r.dropped.Add(count)
			failed = true
		} else {
			r.sent.Add(count)
		}
		batch, count = batch[:0], 0
	}
	for k, n := range taken {
		batch = append(batch, client.StaleRejection{Scope: k.scope, Presented: k.presented, Highest: k.highest,
			Owner: k.owner, Resource: r.cfg.Resource, Count: n})
		count += uint64(n)
		if len(batch) == r.cfg.BatchSize {
			flush()
		}
	}
	flush()
	return failed
}
