package testutil

import (
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
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

// parked blocks until release closes: a goroutine with a name to look for.
func parked(started chan<- struct{}, release <-chan struct{}) {
	close(started)
	<-release
}

func TestGoroutinesSinceFindsWhatWasStarted(t *testing.T) {
	before := Goroutines()
	started, release := make(chan struct{}), make(chan struct{})
	go parked(started, release)
	<-started
	if left := GoroutinesSince(before, "testutil.parked"); len(left) != 1 || !strings.Contains(left[0], "testutil.parked(") {
		t.Fatalf("GoroutinesSince = %q, want the one parked goroutine", left)
	}
	if left := GoroutinesSince(before, "testutil.nothingOfThatName"); len(left) != 0 {
		t.Errorf("GoroutinesSince of other code = %q, want none", left)
	}
	if left := GoroutinesSince(Goroutines(), "testutil.parked"); len(left) != 0 {
		t.Errorf("GoroutinesSince of a set that has it = %q, want none", left)
	}
	close(release)
	Eventually(t, 10*time.Second, func() error {
		if left := GoroutinesSince(before, "testutil.parked"); len(left) != 0 {
			return fmt.Errorf("%d still running after its end", len(left))
		}
		return nil
	})
}

func TestSyncBufferKeepsEachWrite(t *testing.T) {
	var b SyncBuffer
	for _, s := range []string{"a\n", "", "bc\nd\n"} {
		if n, err := b.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	if got, want := b.Writes(), []string{"a\n", "", "bc\nd\n"}; !slices.Equal(got, want) {
		t.Errorf("Writes() = %q, want %q", got, want)
	}
	if got, want := b.String(), "a\nbc\nd\n"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

func TestEchoServerSendsBackWhatItGets(t *testing.T) {
	c, err := net.Dial("tcp", EchoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 5)
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "ping\n" {
		t.Fatalf("echo %q (%v), want %q", got, err, "ping\n")
	}
}
