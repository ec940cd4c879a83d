package main

import "testing"

func TestGCPercent(t *testing.T) {
	for _, c := range []struct {
		live uint64
		want int
	}{
		{0, 400},
		{1 << 20, 400},  // tiny heap: capped
		{16 << 20, 400}, // 64 MiB headroom is 400%
		{32 << 20, 200}, // 64 MiB headroom is 200%
		{128 << 20, 50}, // 64 MiB headroom is 50%
		{200 << 20, 32}, // a million leases: 64 MiB headroom
		{256 << 20, 25}, // a quarter of the live heap equals the headroom
		{1 << 30, 25},   // large heap: GOGC=25
		{100 << 20, 64}, // in between
	} {
		if got := gcPercent(c.live); got != c.want {
			t.Errorf("gcPercent(%d MiB) = %d, want %d", c.live>>20, got, c.want)
		}
	}
}
