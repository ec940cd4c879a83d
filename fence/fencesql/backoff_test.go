package fencesql

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// TestBackoffBounds checks, on synctest's clock, that retry n waits between
// half and all of min(RetryBackoff * 2^(n-1), MaxRetryBackoff), and that a
// wait ends with the context.
func TestBackoffBounds(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want []time.Duration // full wait of retries 1, 2, ...
	}{
		{Config{}, []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 40 * time.Millisecond,
			80 * time.Millisecond, 160 * time.Millisecond, 320 * time.Millisecond, 640 * time.Millisecond,
			time.Second, time.Second}},
		{Config{RetryBackoff: time.Hour, MaxRetryBackoff: 2 * time.Hour}, []time.Duration{time.Hour, 2 * time.Hour, 2 * time.Hour}},
	} {
		for n, full := range c.want {
			retry := n + 1
			for range 20 {
				synctest.Test(t, func(t *testing.T) {
					start := time.Now()
					if err := c.cfg.backoff(context.Background(), retry); err != nil {
						t.Fatal(err)
					}
					if got := time.Since(start); got < full/2 || got > full {
						t.Fatalf("retry %d of %+v waited %v, want [%v, %v]", retry, c.cfg, got, full/2, full)
					}
				})
			}
		}
	}
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start := time.Now()
		err := Config{RetryBackoff: time.Hour, MaxRetryBackoff: time.Hour}.backoff(ctx, 1)
		if err != context.DeadlineExceeded || time.Since(start) != time.Second {
			t.Fatalf("backoff = %v after %v; want the deadline after 1s", err, time.Since(start))
		}
	})
}
