package testutil

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"
)

// fakeT records a failure instead of ending the test, so that Eventually's
// timeout path can be checked.
type fakeT struct {
	testing.TB
	failed string
}

func (f *fakeT) Helper() {}
func (f *fakeT) Fatalf(format string, args ...any) {
	f.failed = fmt.Sprintf(format, args...)
}

func TestEventuallyReturnsOnceTheConditionHolds(t *testing.T) {
	calls := 0
	Eventually(t, time.Minute, func() error {
		if calls++; calls < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if calls != 3 {
		t.Fatalf("cond called %d times, want 3", calls)
	}
}

func TestEventuallyFailsWithTheLastError(t *testing.T) {
	f := &fakeT{TB: t}
	calls := 0
	Eventually(f, 20*time.Millisecond, func() error {
		calls++
		if f.failed != "" {
			return nil // Fatalf returned in the fake: end the loop
		}
		return fmt.Errorf("attempt %d", calls)
	})
	want := fmt.Sprintf("not within 20ms: attempt %d", calls-1)
	if f.failed != want {
		t.Fatalf("failure %q, want %q", f.failed, want)
	}
}

func TestFreeAddrCanBeBound(t *testing.T) {
	addr, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen on %s: %v", addr, err)
	}
	ln.Close()
}

func TestFreeAddrBelowEphemeralRange(t *testing.T) {
	seen := make(map[string]bool)
	for range 50 {
		addr, err := FreeAddr()
		if err != nil {
			t.Fatal(err)
		}
		_, port, _ := net.SplitHostPort(addr)
		if p, _ := strconv.Atoi(port); p < lowestPort || p >= ephemeralLow {
			t.Fatalf("port %d outside [%d, %d)", p, lowestPort, ephemeralLow)
		}
		if seen[addr] {
			t.Fatalf("%s handed out twice", addr)
		}
		seen[addr] = true
	}
}
