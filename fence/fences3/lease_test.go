package fences3_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fences3"
	"github.com/fencedio/fenced/internal/fencedtest"
)

// A write re-sent with the same token and sequence is a duplicate: applied
// once, even when the first attempt's reply was lost after the server
// stored it.
func TestSequenceResend(t *testing.T) {
	name := newBucketName(t)
	tr := &transport{}
	var seen decisions
	g := guardOver(t, newClient(t, tr), name, fences3.Config{Observer: &seen})
	ctx := context.Background()
	app := func(s string) func([]byte) ([]byte, error) {
		return func(b []byte) ([]byte, error) { return append(b, s...), nil }
	}
	if err := g.Update(fence.WithSequence(ctx, 1), "log", 7, "log", app("a")); err != nil {
		t.Fatal(err)
	}
	var dup *fence.DuplicateError
	if err := g.Update(fence.WithSequence(ctx, 1), "log", 7, "log", app("a")); !errors.As(err, &dup) || dup.Last != 1 || dup.Sequence != 1 {
		t.Fatalf("resend of (7, 1) = %v; want a duplicate", err)
	}
	// The reply to sequence 2 is lost after the server stored it: the
	// guard cannot know, and says so; fence.Retry sends it again with the
	// same sequence, which the guard finds applied.
	tr.dropNextReply()
	err := g.Update(fence.WithSequence(ctx, 2), "log", 7, "log", app("b"))
	if !errors.Is(err, fence.ErrUnknownOutcome) {
		t.Fatalf("lost reply = %v; want ErrUnknownOutcome", err)
	}
	err = fence.Retry(ctx, counter(2), 3, func(ctx context.Context) error {
		return g.Update(ctx, "log", 7, "log", app("b"))
	})
	if err != nil {
		t.Fatalf("Retry = %v", err)
	}
	o, err := g.Get(ctx, "log")
	if err != nil || string(o.Data) != "ab" || o.Sequence != 2 {
		t.Fatalf("object = %+v, %v; want ab, last sequence 2 (each write applied once)", o, err)
	}
	var dups int
	for _, d := range seen.all() {
		if d.Duplicate {
			dups++
		}
	}
	if dups != 2 {
		t.Fatalf("observer saw %d duplicates, want 2", dups)
	}
	// A strict guard refuses a gap and accepts last+1.
	strict := guardOver(t, newClient(t, nil), name, fences3.Config{StrictSequences: true})
	if err := strict.Put(fence.WithSequence(ctx, 4), "log", 7, "log", nil, nil); !errors.Is(err, fence.ErrSequenceGap) {
		t.Fatalf("gap = %v", err)
	}
	if err := strict.Put(fence.WithSequence(ctx, 3), "log", 7, "log", []byte("c"), nil); err != nil {
		t.Fatalf("last+1 = %v", err)
	}
}

// counter is a fence.Sequencer that hands out one sequence.
type counter uint64

func (c counter) NextSequence() uint64 { return uint64(c) }

// recordingLease passes a lease on and records MarkLost.
type recordingLease struct {
	fence.Lease
	mu   sync.Mutex
	lost []error
}

func (l *recordingLease) MarkLost(err error) {
	l.mu.Lock()
	l.lost = append(l.lost, err)
	l.mu.Unlock()
	l.Lease.MarkLost(err)
}

// Owner passes the inner lease's owner on (fence.Owned).
func (l *recordingLease) Owner() string { return l.Lease.(fence.Owned).Owner() }

func (l *recordingLease) losses() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.lost)
}

// A real fenced lease: A writes, stops renewing (a pause) and its lease
// expires; B acquires the key and writes; A's late write is refused, A's
// lease is told, and the object holds B's data.
func TestPausedWriter(t *testing.T) {
	srv := fencedtest.Start(t)
	ctx := context.Background()
	ca := srv.Client(t, client.Config{Owner: "A", TTL: 300 * time.Millisecond})
	cb := srv.Client(t, client.Config{Owner: "B"})
	var seen decisions
	g, _ := newBucket(t, fences3.Config{Observer: &seen})

	la, err := ca.Acquire(ctx, "reports/daily")
	if err != nil {
		t.Fatal(err)
	}
	a := &recordingLease{Lease: la}
	if err := g.PutLease(ctx, a, "reports/daily.csv", []byte("A: day 1"), nil); err != nil {
		t.Fatalf("A's write while holding the lease: %v", err)
	}
	la.Orphan() // A pauses: no renewals; the lease expires after its TTL
	lb, err := cb.Acquire(ctx, "reports/daily", client.WithWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Release(ctx)
	if lb.Token() <= la.Token() {
		t.Fatalf("B's token %d is not above A's %d", lb.Token(), la.Token())
	}
	if err := g.PutLease(ctx, lb, "reports/daily.csv", []byte("B: day 1"), nil); err != nil {
		t.Fatalf("B's write: %v", err)
	}

	// A resumes and writes as if it still held the lease.
	err = g.UpdateLease(ctx, a, "reports/daily.csv", func(b []byte) ([]byte, error) { return append(b, "\nA: late"...), nil })
	var stale *fence.StaleTokenError
	if !errors.As(err, &stale) || stale.Presented != la.Token() || stale.Highest != lb.Token() {
		t.Fatalf("A's late write = %v; want stale, %d against %d", err, la.Token(), lb.Token())
	}
	if lost := a.losses(); len(lost) != 1 || !errors.Is(lost[0], fence.ErrStaleToken) {
		t.Fatalf("A's lease was told %v; want one stale rejection", lost)
	}
	if err := g.DeleteLease(ctx, a, "reports/daily.csv"); !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("A's late delete = %v; want stale", err)
	}
	o, err := g.Get(ctx, "reports/daily.csv")
	if err != nil || string(o.Data) != "B: day 1" || o.Token != lb.Token() {
		t.Fatalf("object = %+v, %v; want B's data under B's token", o, err)
	}
	var rejectedA bool
	for _, d := range seen.all() {
		if !d.Accepted && d.Owner == "A" && d.Highest == lb.Token() {
			rejectedA = true
		}
	}
	if !rejectedA {
		t.Fatalf("the observer did not see A's rejection with its owner: %+v", seen.all())
	}
}

// The commit pointer: data under new keys, then the pointer through the
// guard. A stale writer's data objects exist, but no pointer names them.
func TestCommitPointer(t *testing.T) {
	g, bucket := newBucket(t, fences3.Config{})
	ctx := context.Background()
	commit := func(token uint64, parts ...string) error {
		var keys []string
		for _, p := range parts {
			k := fences3.DataKey("tables/orders/data/", token)
			if err := g.PutData(ctx, "tables/orders", token, k, []byte(p), nil); err != nil {
				return err
			}
			keys = append(keys, k)
		}
		return g.Put(ctx, "tables/orders", token, "tables/orders/manifest", []byte(strings.Join(keys, "\n")), nil)
	}
	if err := commit(5, "a1", "a2"); err != nil {
		t.Fatal(err)
	}
	if err := commit(6, "b1", "b2", "b3"); err != nil {
		t.Fatal(err)
	}
	if err := commit(5, "late"); !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("stale commit = %v", err)
	}
	m, err := g.Get(ctx, "tables/orders/manifest")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, k := range strings.Split(string(m.Data), "\n") {
		if !strings.HasPrefix(k, "tables/orders/data/00000000000000000006-") {
			t.Fatalf("manifest names %q, not a data key of token 6", k)
		}
		o, err := g.Head(ctx, k)
		if err != nil || o.Token != 6 || o.Scope != "tables/orders" {
			t.Fatalf("data object %q: %+v, %v", k, o, err)
		}
		got = append(got, string(rawGet(t, bucket, k))) // data objects are stored as they are
	}
	if !slices.Equal(got, []string{"b1", "b2", "b3"}) {
		t.Fatalf("committed data %q, want b1 b2 b3", got)
	}
	k := fences3.DataKey("tables/orders/data/", 6)
	if err := g.PutData(ctx, "tables/orders", 6, k, []byte("x"), nil); err != nil {
		t.Fatal(err)
	}
	if err := g.PutData(ctx, "tables/orders", 6, k, []byte("y"), nil); !errors.Is(err, fences3.ErrExists) {
		t.Fatalf("second PutData of one key = %v; want ErrExists", err)
	}
}
