package admission

import (
	"bufio"
	"net"
)

// BufferedListener gives every accepted connection a read buffer. The
// HTTP/2 server reads each frame's 9-byte header and its payload from the
// connection in separate reads; through the buffer, one system call
// usually brings in both, and often the frames after them. The HTTP/1.1
// server's own 4 KiB reads bypass the buffer when it is empty.
type BufferedListener struct{ net.Listener }

// Accept accepts the next connection and puts a read buffer under it.
func (l BufferedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &bufferedConn{Conn: c, r: bufio.NewReaderSize(c, 4<<10)}, nil
}

type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// NetConn returns the connection under the buffer.
func (c *bufferedConn) NetConn() net.Conn { return c.Conn }
