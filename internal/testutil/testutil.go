// Package testutil holds the small helpers that tests and the harnesses
// built on them (bench, torture) would otherwise each write again: waiting
// for a condition without a fixed sleep, picking a free loopback port,
// collecting concurrent log output, echoing connections, finding the
// goroutines a test left running, and reading the process's CPU time.
package testutil

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Eventually calls cond until it returns nil and fails t with cond's last
// error if that has not happened within timeout. It polls, starting at 1ms
// and backing off to 50ms, so a condition that holds at once costs nothing
// and a slow machine only makes the wait longer, never the test wrong: the
// timeout is a bound on a hang, not part of what is tested.
//
// cond runs on the calling goroutine, so it may call t.Fatal itself, for
// instance when the thing waited for can no longer happen.
func Eventually(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	pause := time.Millisecond
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %v", timeout, err)
		}
		time.Sleep(pause)
		pause = min(2*pause, 50*time.Millisecond)
	}
}

// FreeAddr returns a loopback host:port that nothing listens on, for a
// process that must be told its address before it binds it (and may bind it
// again after a restart). Where the caller can bind the listener itself, it
// should listen on 127.0.0.1:0 instead.
//
// The port is picked at random below the kernel's ephemeral range, where no
// listener on port 0 and no outgoing connection anywhere on the machine is
// given it, so it stays free until the process binds it: a port from the
// ephemeral range was seen taken in that gap while the test suites ran.
// Only another caller of FreeAddr in another process can still pick the
// same port; one process gets a port again only after it has been handed
// half of the ports below the range.
func FreeAddr() (string, error) { return FreeAddrOn("127.0.0.1") }

// FreeAddrOn is FreeAddr on the local address ip (for instance another
// loopback address than 127.0.0.1, to tell processes apart by address).
func FreeAddrOn(ip string) (string, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	if handedOut.ports == nil || len(handedOut.ports) > (ephemeralLow-lowestPort)/2 {
		handedOut.ports = make(map[int]bool)
	}
	var err error
	for range 100 {
		port := lowestPort + rand.IntN(ephemeralLow-lowestPort)
		if handedOut.ports[port] {
			continue
		}
		var ln net.Listener
		ln, err = net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
		if err != nil {
			continue // taken
		}
		ln.Close()
		handedOut.ports[port] = true
		return ln.Addr().String(), nil
	}
	return "", fmt.Errorf("no free port on %s below %d: %w", ip, ephemeralLow, err)
}

// lowestPort is the lowest port FreeAddr hands out, above the well-known
// services' ports (PostgreSQL, MySQL, Redis, fenced's default 7420).
const lowestPort = 10000

// ephemeralLow is the first port of the kernel's ephemeral range.
var ephemeralLow = func() int {
	low := 32768 // Linux's default; other systems start higher
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		fmt.Sscan(string(b), &low)
	}
	return max(low, lowestPort+1000)
}()

// handedOut holds the ports FreeAddr returned in this process.
var handedOut struct {
	sync.Mutex
	ports map[int]bool
}

// MustFreeAddr is FreeAddr for tests: it fails t when no port can be had.
func MustFreeAddr(t testing.TB) string {
	t.Helper()
	addr, err := FreeAddr()
	if err != nil {
		t.Fatalf("free loopback address: %v", err)
	}
	return addr
}

// SyncBuffer is an io.Writer that many goroutines may write to while a test
// reads what they wrote, such as the output of a server's logger: all of
// it (String) or call by call (Writes).
type SyncBuffer struct {
	mu   sync.Mutex
	b    strings.Builder
	ends []int // where each Write ended in b
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.Write(p)
	s.ends = append(s.ends, s.b.Len())
	return len(p), nil
}

// Writes returns what each Write call wrote, in order: for tests of how
// output is split into writes.
func (s *SyncBuffer) Writes() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	all, start := s.b.String(), 0
	writes := make([]string, len(s.ends))
	for i, end := range s.ends {
		writes[i], start = all[start:end], end
	}
	return writes
}

// String returns everything written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// EchoServer listens on a loopback port until the test ends and sends
// every connection back what it receives; it returns the address. It stands
// for the server behind a proxy under test.
func EchoServer(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	return ln.Addr().String()
}

// Goroutines returns the stack of every goroutine of the process, by its
// header's id ("goroutine 7"). Take it before starting what a test checks,
// and pass it to GoroutinesSince afterwards.
func Goroutines() map[string]string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	all := map[string]string{}
	for _, g := range strings.Split(string(buf), "\n\n") {
		id, _, _ := strings.Cut(g, " [")
		all[id] = g
	}
	return all
}

// GoroutinesSince returns the stacks, sorted, of the goroutines running
// now that were not in before and whose stacks mention any of code (say
// "github.com/fencedio/fenced/client."): what a test started and left
// running.
func GoroutinesSince(before map[string]string, code ...string) []string {
	var left []string
	for id, g := range Goroutines() {
		if _, ok := before[id]; ok {
			continue
		}
		if slices.ContainsFunc(code, func(c string) bool { return strings.Contains(g, c) }) {
			left = append(left, g)
		}
	}
	slices.Sort(left)
	return left
}

// ProcessCPU returns the CPU time (user and system) this process has used,
// for benchmarks that report CPU per operation beside time per operation.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
