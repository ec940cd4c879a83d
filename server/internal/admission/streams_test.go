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
	l := NewStreamLimiter("watchers", "max-watchers", 3, 2, 3, Networks{V4: 24, V6: 64}, func(limit string) { refused = append(refused, limit) })
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
	if _, err := NewStreamLimiter("subscribers", "max-event-subscribers", 0, 1, 1, Networks{V4: 24, V6: 64}, nil).Acquire("a"); !errors.Is(err, ErrTooManyStreams) {
		t.Fatalf("a limiter of 0 without refused: %v, want ErrTooManyStreams", err)
	}
}

// A network's streams are capped on top of its addresses': an address
// with room is refused once its network is full, another network is not,
// and a stream given back frees its network's room too.
func TestStreamLimiterPerNetwork(t *testing.T) {
	var refused []string
	l := NewStreamLimiter("watchers", "max-watchers", 10, 2, 3, Networks{V4: 24, V6: 64}, func(limit string) { refused = append(refused, limit) })
	var first func()
	for i, ip := range []string{"192.0.2.1", "192.0.2.1", "192.0.2.2"} {
		release, err := l.Acquire(ip)
		if err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
		if first == nil {
			first = release
		}
	}
	_, err := l.Acquire("192.0.2.3")
	if !errors.Is(err, ErrTooManyStreams) || !strings.Contains(err.Error(), "3 watchers open from the network 192.0.2.0/24 (limit 3 per network)") {
		t.Fatalf("a fourth stream from the network: %v, want ErrTooManyStreams naming the network", err)
	}
	if _, err := l.Acquire("198.51.100.1"); err != nil {
		t.Fatalf("a stream from another network: %v", err)
	}
	first()
	if _, err := l.Acquire("192.0.2.3"); err != nil {
		t.Fatalf("a stream once the network has room: %v", err)
	}
	if want := []string{"max-watchers-per-network"}; !slices.Equal(refused, want) {
		t.Fatalf("refusals told %q, want %q", refused, want)
	}
}
