package admission

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// The per-client limit refuses one address while others still get
// streams, the total refuses everyone, each refusal names its flag, and
// a slot given back (once, however often its func is called) is free
// again.
func TestStreamLimiter(t *testing.T) {
	var refused []string
	l := NewStreamLimiter("watchers", "max-watchers", 3, 2, func(limit string) { refused = append(refused, limit) })
	a1, err := l.Acquire("a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Acquire("a"); err != nil {
		t.Fatal(err)
	}
	_, err = l.Acquire("a")
	if !errors.Is(err, ErrTooManyStreams) || !strings.Contains(err.Error(), "2 watchers open from a (limit 2 per client)") {
		t.Fatalf("third stream from a: %v, want ErrTooManyStreams naming the per-client limit", err)
	}
	if _, err := l.Acquire("b"); err != nil {
		t.Fatalf("a stream from b while a is full: %v", err)
	}
	_, err = l.Acquire("c")
	if !errors.Is(err, ErrTooManyStreams) || !strings.Contains(err.Error(), "3 watchers open on this server (limit 3)") {
		t.Fatalf("fourth stream: %v, want ErrTooManyStreams naming the total", err)
	}
	if want := []string{"max-watchers-per-client", "max-watchers"}; !slices.Equal(refused, want) {
		t.Fatalf("refusals told %q, want %q", refused, want)
	}
	a1()
	a1()
	if got := l.Open(); got != 2 {
		t.Fatalf("after one stream's slot was given back twice: %d open, want 2", got)
	}
	if _, err := l.Acquire("c"); err != nil {
		t.Fatalf("a stream once a slot is free: %v", err)
	}
	if _, err := NewStreamLimiter("subscribers", "max-event-subscribers", 0, 1, nil).Acquire("a"); !errors.Is(err, ErrTooManyStreams) {
		t.Fatalf("a limiter of 0 without refused: %v, want ErrTooManyStreams", err)
	}
}
