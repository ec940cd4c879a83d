package admission

import (
	"sync"
	"testing"
)

// Each address gets its own limit slots; a full address is refused with
// the count it has in use, and a slot given back is taken again.
func TestCallSlotsPerAddress(t *testing.T) {
	c := NewCallSlots(2)
	var a1, a2, a3, b1 Slot
	for i, s := range []*Slot{&a1, &a2} {
		if ok, n := c.Take("a", s); !ok || n != i+1 {
			t.Fatalf("slot %d of a: %v, %d in use; want taken, %d", i+1, ok, n, i+1)
		}
	}
	if ok, n := c.Take("a", &a3); ok || n != 2 {
		t.Fatalf("third slot of a: %v, %d in use; want refused, 2", ok, n)
	}
	a3.Release() // refused: holds nothing
	if got := c.InUse("a"); got != 2 {
		t.Fatalf("releasing a refused slot: a has %d in use, want 2", got)
	}
	if ok, _ := c.Take("b", &b1); !ok {
		t.Fatal("b refused while only a is full")
	}
	a1.Release()
	a1.Release() // twice: given back once
	if got := c.InUse("a"); got != 1 {
		t.Fatalf("after one slot released twice: a has %d in use, want 1", got)
	}
	var a4 Slot
	if ok, n := c.Take("a", &a4); !ok || n != 2 {
		t.Fatalf("a slot given back: %v, %d in use; want taken, 2", ok, n)
	}
	var zero Slot
	zero.Release()
	var none *Slot
	none.Release()
}

// Slots taken and given back from many goroutines at once leave none in
// use, and never more than the limit at once.
func TestCallSlotsConcurrent(t *testing.T) {
	const limit = 3
	c := NewCallSlots(limit)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 200 {
				var s Slot
				if ok, n := c.Take("a", &s); ok {
					if n > limit {
						t.Errorf("%d slots in use, limit %d", n, limit)
					}
					s.Release()
					s.Release()
				}
			}
		})
	}
	wg.Wait()
	if got := c.InUse("a"); got != 0 {
		t.Fatalf("%d slots in use after every one was released", got)
	}
}
