package hist

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestIndexIsMonotonicAndTight(t *testing.T) {
	prev := -1
	for _, v := range []uint64{0, 1, 63, 64, 65, 127, 128, 1000, 1 << 20, 1<<40 + 12345, 1<<63 - 1} {
		i := index(v)
		if i < prev {
			t.Fatalf("index(%d) = %d below previous %d", v, i, prev)
		}
		prev = i
		lo := lowest(i)
		if lo > v || (v-lo)*64 > v {
			t.Fatalf("bucket %d of %d starts at %d: error above 1/64", i, v, lo)
		}
	}
}

func TestQuantilesMatchSortedData(t *testing.T) {
	var h Histogram
	vals := make([]time.Duration, 10000)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range vals {
		vals[i] = time.Duration(r.ExpFloat64() * float64(time.Millisecond))
		h.Record(vals[i])
	}
	slices.Sort(vals)
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
		want := vals[int(q*float64(len(vals)))]
		got := h.Quantile(q)
		if got > want || float64(want-got) > float64(want)/60 {
			t.Errorf("q%.3f = %v, want within 1/64 below %v", q, got, want)
		}
	}
	if h.Max() != vals[len(vals)-1] || h.Count() != uint64(len(vals)) {
		t.Errorf("max %v count %d", h.Max(), h.Count())
	}
	var m Histogram
	m.Merge(&h)
	m.Merge(&h)
	if m.Count() != 2*h.Count() || m.Quantile(0.5) != h.Quantile(0.5) {
		t.Errorf("merge: count %d p50 %v", m.Count(), m.Quantile(0.5))
	}
}
