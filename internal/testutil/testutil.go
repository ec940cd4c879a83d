// Package testutil holds the small helpers that tests and the harnesses
// built on them (bench, torture) would otherwise each write again: waiting
// for a condition without a fixed sleep, picking a free loopback port, and
// collecting concurrent log output.
package testutil

import (
	"net"
	"strings"
	"sync"
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

// FreeAddr returns a loopback host:port that nothing listened on a moment
// ago, for a process that must be told its address before it binds it.
// Another process could take the port in between; the server's start then
// fails loudly rather than the test measuring the wrong thing. Where the
// caller can bind the listener itself, it should listen on 127.0.0.1:0
// instead.
func FreeAddr() (string, error) { return FreeAddrOn("127.0.0.1") }

// FreeAddrOn is FreeAddr on the local address ip (for instance another
// loopback address than 127.0.0.1, to tell processes apart by address).
func FreeAddrOn(ip string) (string, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
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
// reads what they wrote, such as the output of a server's logger.
type SyncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
