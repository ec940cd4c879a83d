// Package seqstress is the guard stress for sequences (docs/guard-spec.md,
// section 7), shared by the tests of every guard: writers with
// interleaved tokens write one scope, each write with the next sequence of
// its token; a share of the writes get a first attempt under a deadline cut
// short, after which (and after every error whose outcome is unknown) the
// writer sends the same token and sequence again through fence.Retry. The
// audit then compares what the resource applied, per (token, sequence),
// with what each write reported:
//
//   - every (token, sequence) is applied at most once;
//   - an acknowledged write (nil, or a duplicate of an attempt that landed)
//     is applied exactly once: no acknowledged write is missing;
//   - a write refused as stale or that failed is applied at most once (an
//     earlier attempt of it may have landed before its answer was lost);
//   - nothing is applied that no writer sent.
package seqstress

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencedio/fenced/fence"
)

// Key is one write: its token and sequence.
type Key struct{ Token, Seq uint64 }

// Config sizes a run.
type Config struct {
	Writers  int
	Duration time.Duration
	// CutShare is the share of writes whose first attempt runs under a
	// deadline of Cut (which the writer then treats as an unknown outcome).
	CutShare float64
	Cut      time.Duration
	// Timeout bounds every other attempt. Attempts bounds fence.Retry.
	Timeout  time.Duration
	Attempts int
	// Reacquire is how long a writer whose token went stale waits before
	// it takes a new, higher one (a lease acquisition), so that writes are
	// not all fenced off at once.
	Reacquire time.Duration
	// Fault, if set, runs in the background during the run (connection
	// kills); it returns how many faults it injected when ctx ends.
	Fault func(ctx context.Context) int
}

// Result counts what the writers saw.
type Result struct {
	Writes, Acked, Duplicates, Stale, Failed, Cut, Faults int
	FailedApplied                                         int
}

func (r Result) String() string {
	return fmt.Sprintf("%d writes: %d acknowledged (%d of them as duplicates of an earlier attempt), %d stale, %d failed (%d of those applied); %d first attempts cut; %d faults",
		r.Writes, r.Acked, r.Duplicates, r.Stale, r.Failed, r.FailedApplied, r.Cut, r.Faults)
}

type outcome int

const (
	acked outcome = iota
	stale
	failed
)

type sent struct {
	key Key
	out outcome
}

// counter is a fence.Sequencer for one token.
type counter struct{ n uint64 }

func (c *counter) NextSequence() uint64 { c.n++; return c.n }

// Run drives write with cfg, then audits applied(), the resource's own
// record of every application. write must send token with the sequence of
// its context (fence.SequenceFromContext) and return the guard's answer;
// errors it wraps with fence.ErrUnknownOutcome are retried.
func Run(t testing.TB, cfg Config, write func(ctx context.Context, token uint64) error, applied func() map[Key]int) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Duration)
	defer cancel()
	var res Result
	var wg sync.WaitGroup
	if cfg.Fault != nil {
		wg.Go(func() { res.Faults = cfg.Fault(ctx) })
	}
	d := &driver{cfg: cfg, write: write}
	writes := make([][]sent, cfg.Writers)
	dups := make([]int, cfg.Writers)
	for w := range cfg.Writers {
		wg.Go(func() { writes[w], dups[w] = d.writer(ctx) })
	}
	wg.Wait()
	res.Cut = int(d.cuts.Load())
	for _, n := range dups {
		res.Duplicates += n
	}
	audit(t, writes, applied(), &res)
	return res
}

// driver runs the writers of one Run.
type driver struct {
	cfg    Config
	write  func(ctx context.Context, token uint64) error
	issued atomic.Uint64 // the last token handed out
	cuts   atomic.Int64  // first attempts cut short
}

// writer writes until ctx ends, taking a new token after each stale
// answer, and returns what each write reported and how many retries were
// answered as duplicates.
func (d *driver) writer(ctx context.Context) (writes []sent, dups int) {
	tok := d.issued.Add(1)
	seqs := &counter{}
	for ctx.Err() == nil {
		// Every writer's first write is cut, so that a run that gets few
		// writes through (a loaded machine, many faults) still exercises a
		// cut first attempt.
		cut := d.cfg.CutShare > 0 && (len(writes) == 0 || rand.Float64() < d.cfg.CutShare)
		key, dup, err := d.send(tok, seqs, cut)
		if dup {
			dups++
		}
		wr := sent{key: key}
		switch {
		case err == nil:
			wr.out = acked
		case errors.Is(err, fence.ErrStaleToken):
			wr.out = stale
			select {
			case <-ctx.Done():
			case <-time.After(d.cfg.Reacquire):
			}
			tok = d.issued.Add(1)
			seqs = &counter{}
		default:
			wr.out = failed
		}
		writes = append(writes, wr)
	}
	return writes, dups
}

// send makes one write with token tok and the next sequence of seqs,
// through fence.Retry, its first attempt cut short if cut. dup says that a
// retry was answered as a duplicate (an earlier attempt landed).
func (d *driver) send(tok uint64, seqs *counter, cut bool) (key Key, dup bool, err error) {
	attempt := 0
	err = fence.Retry(context.Background(), seqs, d.cfg.Attempts, func(rctx context.Context) error {
		attempt++
		key = Key{tok, fence.SequenceFromContext(rctx)}
		timeout := d.cfg.Timeout
		if cut && attempt == 1 {
			timeout = d.cfg.Cut
			d.cuts.Add(1)
		}
		actx, cancel := context.WithTimeout(rctx, timeout)
		defer cancel()
		err := d.write(actx, tok)
		if errors.Is(err, fence.ErrDuplicate) && attempt > 1 {
			dup = true
		}
		if err != nil && actx.Err() != nil && !errors.Is(err, fence.ErrStaleToken) && !errors.Is(err, fence.ErrDuplicate) {
			// Our own deadline: whatever the error says, the write may
			// have landed.
			err = fmt.Errorf("%w: %w", fence.ErrUnknownOutcome, err)
		}
		return err
	})
	return key, dup, err
}

// audit compares what each write reported with got, how many times the
// resource applied each (token, sequence), and counts the outcomes in res.
func audit(t testing.TB, writes [][]sent, got map[Key]int, res *Result) {
	t.Helper()
	bad := 0
	for _, ws := range writes {
		for _, wr := range ws {
			n := got[wr.key]
			delete(got, wr.key)
			res.Writes++
			ok := n <= 1
			switch wr.out {
			case acked:
				res.Acked++
				ok = n == 1
			case stale:
				res.Stale++
			case failed:
				res.Failed++
				res.FailedApplied += n
			}
			if !ok {
				bad++
				if bad <= 10 {
					t.Errorf("write (token %d, sequence %d) reported %s, applied %d times",
						wr.key.Token, wr.key.Seq, []string{"acknowledged", "stale", "failed"}[wr.out], n)
				}
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d writes' reported outcomes do not match what was applied", bad)
	}
	for k, n := range got {
		t.Errorf("(token %d, sequence %d) applied %d times, sent by no writer", k.Token, k.Seq, n)
	}
	if res.Acked == 0 {
		t.Errorf("no write acknowledged: %v", res)
	}
}
