package fences3_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fences3"
)

// A writes with a guard whose next object PUT is preceded by B's write of
// the same object: A read the object before B wrote, so A's conditional
// PUT gets 412, and A reads again and decides again.
func raceOnce(t *testing.T, cfg fences3.Config) (a, b *fences3.Bucket, tr *transport) {
	t.Helper()
	name := newBucketName(t)
	tr = &transport{}
	return guardOver(t, newClient(t, tr), name, cfg), guardOver(t, newClient(t, nil), name, fences3.Config{}), tr
}

func TestRaceLostToHigherToken(t *testing.T) {
	var seen decisions
	a, b, tr := raceOnce(t, fences3.Config{Observer: &seen})
	ctx := context.Background()
	if err := b.Put(ctx, "orders/7", 5, "o", []byte("first"), nil); err != nil {
		t.Fatal(err)
	}
	tr.beforeNextPut(func() {
		if err := b.Put(ctx, "orders/7", 7, "o", []byte("B"), nil); err != nil {
			t.Errorf("B: %v", err)
		}
	})
	// A read token 5 and decided to write with 6; B's 7 landed in between.
	var stale *fence.StaleTokenError
	if err := a.Put(ctx, "orders/7", 6, "o", []byte("A"), nil); !errors.As(err, &stale) || stale.Highest != 7 {
		t.Fatalf("A = %v; want stale against 7", err)
	}
	if n := tr.count(412); n != 1 {
		t.Fatalf("A's PUTs got %d answers 412, want 1", n)
	}
	if o, err := b.Get(ctx, "o"); err != nil || string(o.Data) != "B" || o.Token != 7 {
		t.Fatalf("object = %+v, %v; want B's under token 7", o, err)
	}
	ds := seen.all()
	if len(ds) != 1 || ds[0].Accepted || ds[0].Presented != 6 || ds[0].Highest != 7 {
		t.Fatalf("A's observer saw %+v; want one stale decision, 6 against 7", ds)
	}
}

// B writes the very bytes A read, under a higher token. S3's ETag is a
// digest of the body: were the body only the data, the ETag would not
// change, A's If-Match would pass, and A's stale write would land over B's
// and lower the token. The guard's write line makes every body new.
func TestRaceSameBytesHigherToken(t *testing.T) {
	a, b, tr := raceOnce(t, fences3.Config{})
	ctx := context.Background()
	if err := b.Put(ctx, "orders/7", 5, "o", []byte("same"), nil); err != nil {
		t.Fatal(err)
	}
	tr.beforeNextPut(func() {
		if err := b.Put(ctx, "orders/7", 7, "o", []byte("same"), nil); err != nil {
			t.Errorf("B: %v", err)
		}
	})
	if err := a.Put(ctx, "orders/7", 5, "o", []byte("A"), nil); !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("A = %v; want stale", err)
	}
	if o, err := b.Get(ctx, "o"); err != nil || string(o.Data) != "same" || o.Token != 7 {
		t.Fatalf("object = %+v, %v; want B's under token 7", o, err)
	}
}

func TestRaceSameTokenRetried(t *testing.T) {
	a, b, tr := raceOnce(t, fences3.Config{})
	ctx := context.Background()
	tr.beforeNextPut(func() {
		if err := b.Put(ctx, "orders/7", 7, "o", []byte("B"), nil); err != nil {
			t.Errorf("B: %v", err)
		}
	})
	// A read no object (If-None-Match: *); B created it meanwhile with the
	// same token: A's second round is accepted and A's data is the last.
	if err := a.Put(ctx, "orders/7", 7, "o", []byte("A"), nil); err != nil {
		t.Fatalf("A = %v", err)
	}
	if n, ok := tr.count(412), tr.count(200); n != 1 || ok != 1 {
		t.Fatalf("A's PUTs got %d answers 412 and %d 200, want 1 and 1", n, ok)
	}
	if o, err := b.Get(ctx, "o"); err != nil || string(o.Data) != "A" || o.Token != 7 {
		t.Fatalf("object = %+v, %v; want A's under token 7", o, err)
	}
}

func TestRaceCreateLostToLowerToken(t *testing.T) {
	a, b, tr := raceOnce(t, fences3.Config{})
	ctx := context.Background()
	tr.beforeNextPut(func() {
		if err := b.Put(ctx, "orders/7", 7, "o", []byte("B"), nil); err != nil {
			t.Errorf("B: %v", err)
		}
	})
	if err := a.Put(ctx, "orders/7", 8, "o", []byte("A"), nil); err != nil {
		t.Fatalf("A = %v", err)
	}
	if o, err := b.Get(ctx, "o"); err != nil || string(o.Data) != "A" || o.Token != 8 || tr.count(412) != 1 {
		t.Fatalf("object = %+v, %v, %d answers 412; want A's under token 8 after one 412", o, err, tr.count(412))
	}
	if err := b.Put(ctx, "orders/7", 7, "o", []byte("B again"), nil); !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("B after A's 8 = %v; want stale", err)
	}
}

// With one round allowed, a lost race is "could not decide", with nothing
// written by A.
func TestContention(t *testing.T) {
	a, b, tr := raceOnce(t, fences3.Config{Attempts: 1})
	ctx := context.Background()
	tr.beforeNextPut(func() {
		if err := b.Put(ctx, "s", 3, "o", []byte("B"), nil); err != nil {
			t.Errorf("B: %v", err)
		}
	})
	err := a.Put(ctx, "s", 3, "o", []byte("A"), nil)
	if !errors.Is(err, fences3.ErrContention) || errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("A = %v; want ErrContention", err)
	}
	if o, err := b.Get(ctx, "o"); err != nil || string(o.Data) != "B" {
		t.Fatalf("object = %+v, %v; want B's", o, err)
	}
}

// Writers with tokens 1 to 8 write one object at once: whatever the
// interleaving, the object ends with writer 8's data (nobody can write
// after 8 but 8), and every other writer was accepted or refused as
// stale, nothing else.
func TestConcurrentTokens(t *testing.T) {
	name := newBucketName(t)
	tr := &transport{}
	g := guardOver(t, newClient(t, tr), name, fences3.Config{Attempts: 100})
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make([]error, 9)
	start := make(chan struct{})
	for tok := uint64(1); tok <= 8; tok++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[tok] = g.Put(ctx, "orders/7", tok, "o", []byte(fmt.Sprint("writer ", tok)), nil)
		}()
	}
	close(start)
	wg.Wait()
	if errs[8] != nil {
		t.Fatalf("writer 8: %v", errs[8])
	}
	for tok, err := range errs[1:8] {
		if err != nil && !errors.Is(err, fence.ErrStaleToken) {
			t.Errorf("writer %d: %v", tok+1, err)
		}
	}
	if o, err := g.Get(ctx, "o"); err != nil || string(o.Data) != "writer 8" || o.Token != 8 {
		t.Fatalf("object = %+v, %v; want writer 8's", o, err)
	}
	t.Logf("%d PUTs stored, %d refused with 412 and decided again", tr.count(200), tr.count(412))
}

// Read-modify-write under contention: every increment under a current
// token lands exactly once (412 races are decided again), and once token
// 10 is stored, no write with 9 is.
func TestConcurrentUpdates(t *testing.T) {
	name := newBucketName(t)
	tr := &transport{}
	g := guardOver(t, newClient(t, tr), name, fences3.Config{Attempts: 1000})
	ctx := context.Background()
	incr := func(token uint64) error {
		return g.Update(ctx, "counter", token, "counter", func(v []byte) ([]byte, error) {
			n, _ := strconv.Atoi(string(v))
			return []byte(strconv.Itoa(n + 1)), nil
		})
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	okLow, staleLow := 0, 0
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				token := uint64(10)
				if w == 0 {
					token = 9 // an older holder, refused once 10 is stored
				}
				err := incr(token)
				mu.Lock()
				switch {
				case err == nil && token == 9:
					okLow++
				case errors.Is(err, fence.ErrStaleToken) && token == 9:
					staleLow++
				case err != nil:
					t.Errorf("token %d: %v", token, err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	o, err := g.Get(ctx, "counter")
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprint(30 + okLow); string(o.Data) != want || o.Token != 10 {
		t.Fatalf("counter %s token %d, want %s token 10 (token 9: %d applied, %d stale)", o.Data, o.Token, want, okLow, staleLow)
	}
	t.Logf("%d PUTs stored, %d refused with 412 and decided again; token 9: %d applied, %d stale",
		tr.count(200), tr.count(412), okLow, staleLow)
}
