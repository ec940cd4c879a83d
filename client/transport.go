package client

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// newTransport returns a transport for one of the default clients: unary
// calls use HTTP/1.1 (with TLS, or without), streams HTTP/2 (h2c, or h2
// with TLS).
func newTransport(streams bool) *http.Transport {
	protocols := new(http.Protocols)
	if streams {
		protocols.SetUnencryptedHTTP2(true)
		protocols.SetHTTP2(true)
	} else {
		protocols.SetHTTP1(true)
	}
	return &http.Transport{
		Protocols: protocols,
		// A stream from a node that stopped answering (paused, cut off)
		// would otherwise wait forever: after 3s without a frame the
		// connection is pinged, and closed if no answer comes within 2s,
		// which ends its streams so that Watch can go on at another node.
		HTTP2:               &http.HTTP2Config{SendPingTimeout: 3 * time.Second, PingTimeout: 2 * time.Second},
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 100,
		// Below the server's idle timeout (60s by default), so the client
		// closes an idle connection before the server does and never sends
		// a call on a connection the server is closing.
		IdleConnTimeout: 50 * time.Second,
	}
}

// inMemoryBodies hands requests to next with their bodies in a
// bytes.Reader. net/http writes the headers of a request whose body it does
// not know to be in memory in a write of their own, which costs client and
// server a system call each per request.
type inMemoryBodies struct{ next http.RoundTripper }

func (t inMemoryBodies) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength <= 0 || r.ContentLength > 1<<20 {
		return t.next.RoundTrip(r)
	}
	body := make([]byte, r.ContentLength)
	_, err := io.ReadFull(r.Body, body)
	r.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("read request body: %w", err)
	}
	r2 := r.WithContext(r.Context()) // a shallow copy: RoundTrip must not change r
	r2.Body = io.NopCloser(bytes.NewReader(body))
	r2.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	return t.next.RoundTrip(r2)
}

// wholeMessages hands streaming requests to next with bodies that return
// each length-prefixed message (a 5-byte prefix and its payload, as Connect
// and gRPC frame them) from one Read when it fits. connect writes the
// prefix and the payload separately, and the HTTP/2 transport sends and
// flushes every Read as a frame of its own: two writes per message on the
// client and two frames for the server to read.
type wholeMessages struct{ next http.RoundTripper }

func (t wholeMessages) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength >= 0 {
		return t.next.RoundTrip(r)
	}
	r2 := r.WithContext(r.Context()) // a shallow copy: RoundTrip must not change r
	r2.Body = &messageReader{body: r.Body}
	return t.next.RoundTrip(r2)
}

// messageReader follows message boundaries in the bytes it passes on.
type messageReader struct {
	body   io.ReadCloser
	prefix [5]byte
	got    int    // bytes of the current prefix seen
	rest   uint32 // payload bytes of the current message not yet seen
}

// Read reads until a message ends, p is full or the body fails.
func (m *messageReader) Read(p []byte) (int, error) {
	n, err := m.body.Read(p)
	m.advance(p[:n])
	for err == nil && n < len(p) && (m.got > 0 || m.rest > 0) {
		var k int
		k, err = m.body.Read(p[n:])
		m.advance(p[n : n+k])
		n += k
	}
	return n, err
}

func (m *messageReader) advance(b []byte) {
	for len(b) > 0 {
		if m.rest > 0 {
			k := min(uint32(len(b)), m.rest)
			m.rest -= k
			b = b[k:]
			continue
		}
		k := copy(m.prefix[m.got:], b)
		m.got += k
		b = b[k:]
		if m.got == len(m.prefix) {
			m.got = 0
			m.rest = binary.BigEndian.Uint32(m.prefix[1:])
		}
	}
}

func (m *messageReader) Close() error { return m.body.Close() }
