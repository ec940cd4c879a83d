package fence_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencebolt"
	"github.com/fencedio/fenced/internal/seqstress"
	"go.etcd.io/bbolt"
)

// sequenceGuards opens each guard of this module, non-strict and strict.
var sequenceGuards = []struct {
	name string
	open func(t *testing.T, strict bool, obs fence.Observer) fence.Guard
}{
	{"memory", func(t *testing.T, strict bool, obs fence.Observer) fence.Guard {
		return fence.NewMemory(fence.MemoryConfig{Observer: obs, StrictSequences: strict})
	}},
	{"bolt", func(t *testing.T, strict bool, obs fence.Observer) fence.Guard {
		return openBolt(t, filepath.Join(t.TempDir(), "fence.db"), fencebolt.Config{Observer: obs, StrictSequences: strict})
	}},
	{"bolt-tx", func(t *testing.T, strict bool, obs fence.Observer) fence.Guard {
		return boltTx{openBolt(t, filepath.Join(t.TempDir(), "fence.db"), fencebolt.Config{Observer: obs, StrictSequences: strict})}
	}},
}

// boltTx runs Do through DoTx.
type boltTx struct{ *fencebolt.Guard }

func (b boltTx) Do(ctx context.Context, scope string, token uint64, apply func(context.Context) error) error {
	return b.DoTx(ctx, scope, token, func(*bbolt.Tx) error { return apply(ctx) })
}

// SequenceStep is one write of a sequence scenario and what it must give.
type sequenceStep struct {
	token, seq uint64
	want       error // nil, fence.ErrDuplicate, fence.ErrSequenceGap, fence.ErrStaleToken
}

var sequenceScenarios = []struct {
	name   string
	strict bool
	steps  []sequenceStep
}{
	{"no sequence", false, []sequenceStep{{5, 0, nil}, {5, 0, nil}, {4, 0, fence.ErrStaleToken}, {6, 0, nil}}},
	{"in order", false, []sequenceStep{{5, 1, nil}, {5, 2, nil}, {5, 7, nil}, {5, 8, nil}}},
	{"duplicate", false, []sequenceStep{{5, 1, nil}, {5, 2, nil}, {5, 2, fence.ErrDuplicate}, {5, 1, fence.ErrDuplicate}, {5, 3, nil}}},
	{"new epoch", false, []sequenceStep{{5, 9, nil}, {6, 1, nil}, {6, 1, fence.ErrDuplicate}, {5, 10, fence.ErrStaleToken}, {7, 100, nil}}},
	{"new epoch without sequence forgets the last", false, []sequenceStep{{5, 9, nil}, {6, 0, nil}, {6, 1, nil}}},
	{"same epoch without sequence keeps the last", false, []sequenceStep{{5, 9, nil}, {5, 0, nil}, {5, 9, fence.ErrDuplicate}, {5, 10, nil}}},
	{"gap refused when strict", true, []sequenceStep{{5, 4, nil}, {5, 6, fence.ErrSequenceGap}, {5, 5, nil}, {5, 5, fence.ErrDuplicate}, {5, 6, nil}, {6, 3, nil}, {6, 4, nil}}},
	{"gap accepted when not strict", false, []sequenceStep{{5, 4, nil}, {5, 6, nil}, {5, 5, fence.ErrDuplicate}}},
}

func TestSequences(t *testing.T) {
	t.Parallel()
	for _, g := range sequenceGuards {
		for _, sc := range sequenceScenarios {
			t.Run(g.name+"/"+sc.name, func(t *testing.T) {
				rec := &recorder{}
				guard := g.open(t, sc.strict, rec)
				ctx := context.Background()
				applied := 0
				for i, st := range sc.steps {
					ran := false
					err := guard.Do(fence.WithSequence(ctx, st.seq), "s", st.token, func(context.Context) error {
						ran = true
						return nil
					})
					if st.want == nil && err != nil || st.want != nil && !errors.Is(err, st.want) {
						t.Fatalf("step %d (token %d seq %d): %v, want %v", i, st.token, st.seq, err, st.want)
					}
					if ran != (st.want == nil) {
						t.Fatalf("step %d (token %d seq %d): applied = %v, want %v", i, st.token, st.seq, ran, st.want == nil)
					}
					if ran {
						applied++
					}
					if errors.Is(err, fence.ErrDuplicate) && errors.Is(err, fence.ErrStaleToken) {
						t.Fatalf("step %d: a duplicate matches ErrStaleToken: %v", i, err)
					}
					var dup *fence.DuplicateError
					if errors.As(err, &dup) && (dup.Token != st.token || dup.Sequence != st.seq || dup.Last < st.seq) {
						t.Fatalf("step %d: %+v", i, dup)
					}
				}
				var accepted, duplicates int
				for _, d := range rec.get() {
					if d.Accepted {
						accepted++
					}
					if d.Duplicate {
						duplicates++
						if d.Accepted {
							t.Errorf("decision both accepted and duplicate: %+v", d)
						}
					}
				}
				wantDup := 0
				for _, st := range sc.steps {
					if st.want == fence.ErrDuplicate {
						wantDup++
					}
				}
				if accepted != applied || duplicates != wantDup {
					t.Errorf("observer saw %d accepted, %d duplicates; want %d, %d", accepted, duplicates, applied, wantDup)
				}
			})
		}
	}
}

func TestSequenceOutOfRange(t *testing.T) {
	t.Parallel()
	for _, g := range sequenceGuards {
		t.Run(g.name, func(t *testing.T) {
			guard := g.open(t, false, nil)
			err := guard.Do(fence.WithSequence(context.Background(), fence.MaxSequence+1), "s", 1, nop)
			if !errors.Is(err, fence.ErrInvalidSequence) {
				t.Fatalf("Do: %v, want ErrInvalidSequence", err)
			}
			if h, err := guard.Highest(context.Background(), "s"); err != nil || h != 0 {
				t.Fatalf("Highest = %d, %v; want 0 (nothing recorded)", h, err)
			}
		})
	}
}

// A failed apply records neither the token nor the sequence.
func TestSequenceNotRecordedOnError(t *testing.T) {
	t.Parallel()
	for _, g := range sequenceGuards {
		t.Run(g.name, func(t *testing.T) {
			guard := g.open(t, false, nil)
			ctx := fence.WithSequence(context.Background(), 3)
			boom := errors.New("boom")
			if err := guard.Do(ctx, "s", 2, func(context.Context) error { return boom }); !errors.Is(err, boom) {
				t.Fatalf("Do: %v", err)
			}
			if err := guard.Do(ctx, "s", 2, nop); err != nil {
				t.Fatalf("retry after failed apply: %v", err)
			}
		})
	}
}

type seqLease struct{ n uint64 }

func (l *seqLease) NextSequence() uint64 { l.n++; return l.n }

func TestRetry(t *testing.T) {
	t.Parallel()
	g := fence.NewMemory(fence.MemoryConfig{})
	l := &seqLease{}
	ctx := context.Background()
	// The first attempt is applied but its answer lost; the retry is a
	// duplicate, which Retry reports as success.
	calls := 0
	err := fence.Retry(ctx, l, 3, func(ctx context.Context) error {
		calls++
		err := g.Do(ctx, "s", 1, nop)
		if calls == 1 {
			return fmt.Errorf("lost answer (%v): %w", err, fence.ErrUnknownOutcome)
		}
		return err
	})
	if err != nil || calls != 2 {
		t.Fatalf("Retry = %v after %d calls; want nil after 2", err, calls)
	}
	// A stale token is not retried.
	if err := g.Do(ctx, "s", 9, nop); err != nil {
		t.Fatal(err)
	}
	calls = 0
	err = fence.Retry(ctx, l, 3, func(ctx context.Context) error { calls++; return g.Do(ctx, "s", 1, nop) })
	if !errors.Is(err, fence.ErrStaleToken) || calls != 1 {
		t.Fatalf("Retry = %v after %d calls; want stale after 1", err, calls)
	}
	// Unknown outcomes run out of attempts.
	calls = 0
	err = fence.Retry(ctx, l, 3, func(ctx context.Context) error { calls++; return fence.ErrUnknownOutcome })
	if !errors.Is(err, fence.ErrUnknownOutcome) || calls != 3 {
		t.Fatalf("Retry = %v after %d calls; want unknown after 3", err, calls)
	}
}

type plainLease struct {
	lost []error
}

func (l *plainLease) Key() string        { return "s" }
func (l *plainLease) Token() uint64      { return 3 }
func (l *plainLease) MarkLost(err error) { l.lost = append(l.lost, err) }
func (l *plainLease) Owner() string      { return "worker-a" }
func (l *plainLease) Signature() string  { return "k.sig" }

// A Sequenced lease numbers every lease-taking write from 1 (a lease that
// is not a Sequencer gets a counter), keeps its owner and signature, and a
// sequence already in the context wins.
func TestSequencedLease(t *testing.T) {
	t.Parallel()
	g := fence.NewMemory(fence.MemoryConfig{})
	l := fence.Sequenced(&plainLease{})
	if fence.Sequenced(l) != l {
		t.Fatal("Sequenced of a Sequenced lease wraps it again")
	}
	if o, ok := l.(fence.Owned); !ok || o.Owner() != "worker-a" {
		t.Fatal("the owner is lost")
	}
	if s, ok := l.(interface{ Signature() string }); !ok || s.Signature() != "k.sig" {
		t.Fatal("the signature is lost")
	}
	ctx := context.Background()
	var seen []uint64
	record := func(ctx context.Context) error {
		seen = append(seen, fence.SequenceFromContext(ctx))
		if fence.OwnerFromContext(ctx) != "worker-a" {
			t.Error("owner missing from the write's context")
		}
		return nil
	}
	for range 3 {
		if err := fence.DoLease(ctx, g, l, record); err != nil {
			t.Fatal(err)
		}
	}
	err := fence.DoLease(fence.WithSequence(ctx, 2), g, l, record)
	if !errors.Is(err, fence.ErrDuplicate) {
		t.Fatalf("explicit sequence 2 after 1..3: %v, want duplicate", err)
	}
	if fmt.Sprint(seen) != "[1 2 3]" {
		t.Fatalf("sequences applied %v, want [1 2 3]", seen)
	}
}

// The guard stress: writers with interleaved tokens retry writes whose
// answers their own cut deadlines lost; every (token, sequence) is applied
// at most once and every acknowledged write exactly once.
func TestSequenceStress(t *testing.T) {
	t.Parallel()
	for _, g := range sequenceGuards {
		t.Run(g.name, func(t *testing.T) {
			guard := g.open(t, false, nil)
			var mu sync.Mutex
			applied := map[seqstress.Key]int{}
			write := func(ctx context.Context, token uint64) error {
				err := guard.Do(ctx, "s", token, func(ctx context.Context) error {
					time.Sleep(time.Duration(rand.IntN(1500)) * time.Microsecond)
					mu.Lock()
					applied[seqstress.Key{Token: token, Seq: fence.SequenceFromContext(ctx)}]++
					mu.Unlock()
					return nil
				})
				if err == nil && ctx.Err() != nil {
					return fmt.Errorf("the answer came after the deadline: %w", fence.ErrUnknownOutcome)
				}
				return err
			}
			res := seqstress.Run(t, seqstress.Config{Writers: 6, Duration: time.Second, CutShare: 0.3,
				Cut: time.Millisecond, Timeout: 5 * time.Second, Attempts: 5, Reacquire: 20 * time.Millisecond}, write,
				func() map[seqstress.Key]int { return applied })
			t.Log(res)
			if res.Duplicates == 0 {
				t.Error("no retry met a duplicate: the stress exercised nothing")
			}
		})
	}
}
