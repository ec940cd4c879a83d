// Package hist is a log-linear latency histogram in the style of HDR
// histograms: values are kept in buckets whose width is at most 1/64 of
// their magnitude, so every reported quantile is within about 1.6% of the
// true value, in constant memory and O(1) per record.
package hist

import (
	"math/bits"
	"time"
)

const subBits = 6 // 64 sub-buckets per power of two

// Histogram records durations. The zero value is ready to use. It is not
// safe for concurrent use; give each goroutine its own and Merge them.
type Histogram struct {
	counts [64 << subBits]uint64
	n      uint64
	max    time.Duration
	sum    time.Duration
}

func index(v uint64) int {
	if v < 1<<subBits {
		return int(v)
	}
	exp := bits.Len64(v) - subBits - 1 // shift that leaves subBits+1 significant bits
	return (exp+1)<<subBits + int(v>>uint(exp)) - 1<<subBits
}

// lowest returns the smallest value that maps to bucket i.
func lowest(i int) uint64 {
	if i < 1<<subBits {
		return uint64(i)
	}
	exp := i>>subBits - 1
	return uint64(i&(1<<subBits-1)+1<<subBits) << uint(exp)
}

// Record adds one observation; negative durations count as 0.
func (h *Histogram) Record(d time.Duration) {
	d = max(d, 0)
	h.counts[index(uint64(d))]++
	h.n++
	h.sum += d
	h.max = max(h.max, d)
}

// Merge adds o's observations to h.
func (h *Histogram) Merge(o *Histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.sum += o.sum
	h.max = max(h.max, o.max)
}

// Count returns the number of observations.
func (h *Histogram) Count() uint64 { return h.n }

// Max returns the largest observation.
func (h *Histogram) Max() time.Duration { return h.max }

// Mean returns the average observation.
func (h *Histogram) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return h.sum / time.Duration(h.n)
}

// Quantile returns the value below which a fraction q (0..1) of the
// observations fall, as the lower bound of its bucket (never above Max).
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q * float64(h.n))
	if rank >= h.n {
		rank = h.n - 1
	}
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen > rank {
			return min(time.Duration(lowest(i)), h.max)
		}
	}
	return h.max
}
