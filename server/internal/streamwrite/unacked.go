package streamwrite

import (
	"context"
	"errors"
	"net"
	"sync"
	"syscall"
)

// ErrBehind is Unacked.Send's answer to a stream whose connection holds
// more than the bound unacknowledged: it is to be sent a last message and
// ended.
var ErrBehind = errors.New("stream client behind: too many bytes unacknowledged")

type connKey struct{}

// conn is what the streams of one connection share of it.
type conn struct {
	c net.Conn
	// mu passes the streams' checks and writes one at a time.
	mu   sync.Mutex
	once sync.Once
	rc   syscall.RawConn // nil where the socket is out of reach
}

// ConnContext keeps c in ctx for NewUnacked; it is an http.Server's
// ConnContext.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, &conn{c: c})
}

// Unacked bounds the bytes a stream's connection holds that its client has
// not acknowledged: what a client does not read fills its receive buffer,
// then this side's send buffer, which without a bound the kernel grows to
// megabytes (net.ipv4.tcp_wmem), so that writes to a client that never
// reads succeed for minutes before a write deadline can cut it.
type Unacked struct {
	conn     *conn
	max      int
	exceeded func() // called the first time the bound is exceeded
	over     bool
}

// NewUnacked returns the bound of max bytes for the stream whose request
// context is ctx, which calls exceeded (if not nil) the first time the
// stream exceeds it. It sets the connection's send buffer to max (the
// kernel doubles it), so that past the bound one more write of at most
// MaxWrite bytes and a last message still fit. It is nil (no bound) when max <= 0, when ctx holds no
// connection (ConnContext), or where the platform cannot tell the bytes
// unacknowledged (only Linux can).
func NewUnacked(ctx context.Context, max int, exceeded func()) *Unacked {
	c, _ := ctx.Value(connKey{}).(*conn)
	if max <= 0 || c == nil || !canTell {
		return nil
	}
	c.once.Do(func() { c.rc = rawConn(c.c) })
	if c.rc == nil {
		return nil
	}
	c.rc.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF, max) })
	return &Unacked{conn: c, max: max, exceeded: exceeded}
}

// rawConn returns the socket under c, unwrapping the server's wrappers
// (TLS, the connection limits, the read buffer), which give theirs as
// NetConn; nil if there is none.
func rawConn(c net.Conn) syscall.RawConn {
	for {
		if sc, ok := c.(syscall.Conn); ok {
			rc, err := sc.SyscallConn()
			if err != nil {
				return nil
			}
			return rc
		}
		nc, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return nil
		}
		c = nc.NetConn()
	}
}

// MaxWrite is the most bytes one write within Send may add, so that a last
// message still fits after it; 0 (no limit) on a nil Unacked.
func (u *Unacked) MaxWrite() int {
	if u == nil {
		return 0
	}
	return max(u.max/2, 1)
}

// Send calls write, unless the connection holds more than the bound
// unacknowledged (or did at an earlier Send): then it returns ErrBehind.
// The Sends of a connection's streams (HTTP/2) run one at a time, so that
// past the bound there is at most one write's worth. On a nil Unacked it
// just calls write. Only the stream's handler calls it.
func (u *Unacked) Send(write func() error) error {
	if u == nil {
		return write()
	}
	if u.over {
		return ErrBehind
	}
	u.conn.mu.Lock()
	defer u.conn.mu.Unlock()
	n := 0
	u.conn.rc.Control(func(fd uintptr) { n = sendQueue(fd) })
	if n > u.max {
		u.over = true
		if u.exceeded != nil {
			u.exceeded()
		}
		return ErrBehind
	}
	return write()
}
